"""The lab: the mirror of production that twice is tested and trained against (a Stripe-compatible
server, a retrying gateway, a trace backend, a real LangGraph agent, the scenarios behind
sample_data/, the field realism, the accuracy harness). Used by the drills, the tests, the
benchmarks and `twice lab`; nothing else imports it."""
