"""Sources asked over the network by `twice investigate`: the Stripe API, trace backends
(Jaeger, Tempo, Phoenix, LangSmith), and `investigate`, which asks them in turn."""

# a Stripe-compatible server to ask instead of api.stripe.com (localstripe, a proxy, the lab):
# read by `twice investigate --stripe-base-url` and the web app's live form
STRIPE_BASE_URL_ENV = "TWICE_STRIPE_BASE_URL"
# LangSmith's API key for `--traces langsmith://PROJECT`, the variable its own SDK reads (never
# taken from a URL or a field, never stored)
LANGSMITH_KEY_ENV = "LANGSMITH_API_KEY"
