"""The ``flexjobs`` command, run as a user runs it, against the embedded stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flexjobs_local.stack import LocalStack
from shared.domain.model.ids import doc_id
from tests.integration.helpers import wait_for

FLEXJOBS = str(Path(sys.executable).with_name("flexjobs"))
EVENTS = Path(__file__).parents[1] / "events"


def seed(request_id: str, seconds: int = 30) -> dict[str, Any]:
    body = json.loads((EVENTS / "seed_request.json").read_text())
    body["requestId"] = request_id
    pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
    pool["containerSpec"]["args"] = [str(seconds)]
    return body


def run(stack: LocalStack, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **stack.env}
    return subprocess.run(
        [FLEXJOBS, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def write(tmp_path: Path, name: str, body: Any) -> str:
    path = tmp_path / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(path)


def record(db: Any, request_id: str) -> dict[str, Any] | None:
    return db.collection("jobs").document(doc_id(request_id)).get().to_dict()


def test_validate_good_and_bad(stack: LocalStack, tmp_path: Path, unique: Callable) -> None:
    good = run(stack, "validate", write(tmp_path, "good.json", seed(unique("v"))))
    assert good.returncode == 0, good.stderr
    bad_body = seed(unique("v"))
    bad_body["customJob"]["jobSpec"]["scheduling"]["maxWaitDuration"] = "soon"
    bad = run(stack, "validate", write(tmp_path, "bad.json", bad_body))
    assert bad.returncode == 2
    assert "customJob.jobSpec.scheduling.maxWaitDuration" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_schema_prints_json(stack: LocalStack) -> None:
    done = run(stack, "schema")
    assert done.returncode == 0
    assert json.loads(done.stdout)["type"] == "object"


def test_submit_a_bad_file_publishes_nothing(
    stack: LocalStack, db: Any, tmp_path: Path, unique: Callable
) -> None:
    good, bad = seed(unique("good")), seed(unique("bad"))
    bad["location"] = "global"
    path = write(tmp_path, "batch.jsonl", f"{json.dumps(good)}\n{json.dumps(bad)}\n")
    done = run(stack, "submit", path)
    assert done.returncode == 2
    assert "line 2: location: must be" in done.stderr
    time.sleep(2)  # a published message would have reached intake by now
    assert record(db, good["requestId"]) is None
    assert not db.collection("rejections").document(doc_id(bad["requestId"])).get().exists


def test_submit_status_list_watch(
    stack: LocalStack, db: Any, tmp_path: Path, unique: Callable
) -> None:
    request_id = unique("cli")
    done = run(stack, "submit", write(tmp_path, "job.json", seed(request_id)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == request_id

    watched = run(stack, "watch", request_id, "--timeout", "60", timeout=90)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert f"{request_id}: " in watched.stdout
    assert "-> SUCCEEDED" in watched.stdout

    status = run(stack, "status", request_id, "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["requestId"] == request_id
    assert shown["state"] == "SUCCEEDED"
    assert shown["createdAt"].endswith("Z")
    assert [a["attempt"] for a in shown["attempts"]] == [1]
    table = run(stack, "status", request_id)
    assert table.returncode == 0
    assert "attempts" in table.stdout

    listed = run(stack, "list", "--json", "--since", "1h", "--state", "SUCCEEDED")
    assert listed.returncode == 0, listed.stderr
    assert request_id in [r["requestId"] for r in json.loads(listed.stdout)]
    none = run(stack, "list", "--json", "--state", "FAILED")
    assert request_id not in [r["requestId"] for r in json.loads(none.stdout)]

    unknown = run(stack, "status", unique("nobody"))
    assert unknown.returncode == 1
    assert "no request" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1


def test_submit_wait_follows_to_the_end(
    stack: LocalStack, tmp_path: Path, unique: Callable
) -> None:
    request_id = unique("wait")
    done = run(
        stack,
        "submit",
        "--wait",
        "--timeout",
        "60",
        write(tmp_path, "j.json", seed(request_id)),
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == request_id


@pytest.fixture
def sigint_delivered() -> Iterator[None]:
    """SIGINT as a terminal's Ctrl-C finds a command: a runner that started this suite in the
    background (a shell without job control) passes SIGINT down ignored, and a command that
    inherits an ignored SIGINT rightly keeps ignoring it. With a handler here (not ignored),
    the commands started meanwhile begin with SIGINT's default (exec resets handlers)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_cancel_wait_and_watch_react_without_polling(
    stack: LocalStack, db: Any, tmp_path: Path, unique: Callable, sigint_delivered: None
) -> None:
    stack.simulator.set_capacity("us-central1", "NVIDIA_TESLA_A100", 0)
    request_id = unique("held")
    assert run(stack, "submit", write(tmp_path, "held.json", seed(request_id))).returncode == 0
    wait_for(lambda: (record(db, request_id) or {}).get("state") == "QUEUED", 30, "QUEUED")

    env = {**os.environ, **stack.env}
    watcher = subprocess.Popen(
        [FLEXJOBS, "watch", request_id, "--timeout", "60"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Each line is stamped when it arrives, by a reader running all along: the delay measured
    # below is the watcher's own, not the time this test took to look.
    arrivals: list[tuple[float, str]] = []

    def read() -> None:
        for text in watcher.stdout or ():
            arrivals.append((time.time(), text))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def arrived(marker: str) -> float | None:
        return next((at for at, text in arrivals if marker in text), None)

    try:
        wait_for(lambda: arrived("-> QUEUED"), 30, "the watcher's first line")
        interrupted = subprocess.Popen(
            [FLEXJOBS, "watch", request_id], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            # Ctrl-C on a watch that is watching: once it has printed the state it found (a
            # fixed sleep sent it, on a loaded machine, while the command was still importing).
            assert interrupted.stdout is not None
            first = interrupted.stdout.readline()
            assert b"-> QUEUED" in first, first
            interrupted.send_signal(signal.SIGINT)
            try:
                _, err = interrupted.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                # Where it hangs, for whoever reads the failure (py-spy: the bench extra).
                spy = Path(sys.executable).with_name("py-spy")
                dump = subprocess.run(
                    [str(spy), "dump", "--pid", str(interrupted.pid)],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                stacks = dump.stdout + dump.stderr
                raise AssertionError(f"Ctrl-C did not end the watch:\n{stacks}") from None
        finally:
            if interrupted.poll() is None:
                interrupted.kill()
                interrupted.wait(timeout=10)
        assert interrupted.returncode == 130
        assert b"Traceback" not in err
        cancelled = run(stack, "cancel", request_id, "--wait", "--timeout", "60", timeout=90)
        assert cancelled.returncode == 1, cancelled.stdout + cancelled.stderr
        assert "-> CANCELLED" in cancelled.stdout
        ended = wait_for(
            lambda: (r := record(db, request_id)) and r.get("state") == "CANCELLED" and r,
            10,
            "CANCELLED",
        )
        # The watch sees the change pushed by its listener: within about a second of the write
        # (a poller every few seconds would not).
        seen = wait_for(lambda: arrived("-> CANCELLED"), 10, "the watcher's CANCELLED line")
        assert seen - ended["updatedAt"].timestamp() < 1.5
        assert watcher.wait(timeout=10) == 1
        reader.join(timeout=10)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait(timeout=10)

    status = json.loads(run(stack, "status", request_id, "--json").stdout)
    assert status["state"] == "CANCELLED"
    assert run(stack, "watch", request_id, "--timeout", "30").returncode == 1


@pytest.mark.parametrize("args", [["status", "x"], ["list"]])
def test_an_unreachable_emulator_is_one_line(stack: LocalStack, args: list[str]) -> None:
    env = {**os.environ, **stack.env, "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9"}
    done = subprocess.run(
        [FLEXJOBS, *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 3
    assert "FIRESTORE_EMULATOR_HOST=127.0.0.1:9 is not reachable" in done.stderr
    assert "Traceback" not in done.stderr


def test_logs_prints_each_attempts_entries_and_follows_to_the_end(
    stack: LocalStack, tmp_path: Path, unique: Callable
) -> None:
    request_id = unique("logs")
    assert run(stack, "submit", write(tmp_path, "j.json", seed(request_id, 30))).returncode == 0
    followed = run(stack, "logs", request_id, "--follow", "--interval", "1", timeout=120)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    lines = followed.stdout.splitlines()
    # The simulator's ml_job entries of attempt 1, in time order, each once.
    texts = [line.split("[attempt 1] ", 1)[1] for line in lines if "[attempt 1] " in line]
    assert texts[0] == "Job is queued."
    assert "Job is running." in texts
    assert texts[-1] == "Job completed successfully."
    assert len(texts) == len(set(texts))
    again = run(stack, "logs", request_id)
    assert again.returncode == 0 and again.stdout.splitlines() == lines

    unknown = run(stack, "logs", unique("nobody"))
    assert unknown.returncode == 1 and "no request" in unknown.stderr
