"""The services: the work the handlers share (intake, admission, deployments, series, cancels,
settling, the tick, uploads). A service may call another service, never a handler."""
