"""Sources asked over the network by `twice investigate`: the Stripe API, trace backends
(Jaeger, Tempo, Phoenix, LangSmith, Langfuse), and `investigate`, which asks them in turn."""

# a Stripe-compatible server to ask instead of api.stripe.com (localstripe, a proxy, the lab):
# read by `twice investigate --stripe-base-url` and the web app's live form
STRIPE_BASE_URL_ENV = "TWICE_STRIPE_BASE_URL"
# LangSmith's API key for `--traces langsmith://PROJECT`, the variable its own SDK reads (never
# taken from a URL or a field, never stored)
LANGSMITH_KEY_ENV = "LANGSMITH_API_KEY"
# Langfuse's keys for `--traces langfuse+https://host` when its URL carries none, the variables
# its own SDK reads (never taken by the web form, never stored)
LANGFUSE_PUBLIC_KEY_ENV = "LANGFUSE_PUBLIC_KEY"
LANGFUSE_SECRET_KEY_ENV = "LANGFUSE_SECRET_KEY"
