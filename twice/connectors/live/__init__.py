"""Sources asked over the network by `twice investigate`: the Stripe API, trace backends
(Jaeger, Tempo), and `investigate`, which asks them in turn."""
