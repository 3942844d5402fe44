"""Spot serving that stays up: what one read of an endpoint shows, what a deployment's record
keeps about its serving, how traffic is split, and the rule that follows a Spot deployment
after DEPLOYED (hedge with on-demand replicas, then come back). Pure: no clock, no client.

- :mod:`.model`: the observed endpoint, the deployment's serving state, the settings and the
  action the rule answers with; every stored value bounded in items and bytes.
- :mod:`.split`: the traffic split (largest-remainder shares that sum to 100).
- :mod:`.rule`: :func:`~shared.domain.serving.rule.decide`.
"""
