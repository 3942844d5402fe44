"""Simulated training's step checkpoints: when they fall due, and the writes they ask for.

The objects themselves are written outside the lock by :mod:`.effects`, which is handed a
:class:`CheckpointWrite` per checkpoint.
"""

from __future__ import annotations

import random

from flexjobs_local.simulator.common import CheckpointWrite, Runtime
from flexjobs_local.simulator.job import Job


class Checkpoints:
    """Checkpoint hooks for the job lifecycle. Not thread-safe: the engine holds its lock."""

    def __init__(self, runtime: Runtime, *, enabled: bool, seed: int | None) -> None:
        self._runtime = runtime
        self._enabled = enabled
        self._rng = random.Random(None if seed is None else seed + 2)

    def enabled_for(self, job: Job) -> bool:
        return self._enabled and job.output_uri_prefix.startswith("gs://")

    def on_start(self, job: Job) -> None:
        """Schedule the first step after the one training resumed from."""
        if self.enabled_for(job) and job.checkpoint_every:
            step = (job.resumed_step // job.checkpoint_every + 1) * job.checkpoint_every
            job.next_ckpt_step = step if step < job.run_seconds else None

    def due_at(self, job: Job) -> float | None:
        """Simulated time the next scheduled checkpoint of a running job falls due."""
        if job.next_ckpt_step is None:
            return None
        assert job.start is not None
        return job.start + (job.next_ckpt_step - job.resumed_step)

    def on_due(self, job: Job, at: float) -> None:
        """Write the scheduled checkpoint and schedule the next one."""
        assert job.next_ckpt_step is not None
        self._write(job, job.next_ckpt_step, commit=True, at=at)
        following = job.next_ckpt_step + (job.checkpoint_every or 1)
        job.next_ckpt_step = following if following < job.run_seconds else None

    def on_complete(self, job: Job, at: float) -> None:
        """Write the final step, unless it is already committed."""
        if self.enabled_for(job):
            final = int(job.run_seconds)
            if final > self._last(job):
                self._write(job, final, commit=True, at=at)

    def on_preempt(self, job: Job, at: float) -> None:
        """Sometimes leave a half-written checkpoint: reclaimed mid-save, no commit marker."""
        progress = job.progress(at)
        last = self._last(job)
        if self.enabled_for(job) and self._rng.random() < 0.5:
            step = int(progress)
            if step > last:
                self._write(job, step, commit=False, at=at)

    @staticmethod
    def _last(job: Job) -> int:
        return max(job.committed, default=job.resumed_step)

    def _write(self, job: Job, step: int, *, commit: bool, at: float) -> None:
        bucket, _, path = job.output_uri_prefix[len("gs://") :].partition("/")
        path = path.strip("/")
        prefix = f"{path}/checkpoints/step-{step:08d}" if path else f"checkpoints/step-{step:08d}"
        if commit:
            job.committed.append(step)
        else:
            job.half_written = step
        self._runtime.emit(CheckpointWrite(job.name, job.project, bucket, prefix, step, commit, at))
