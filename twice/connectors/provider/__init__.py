"""What the payment provider recorded: Stripe events (and their DuckDB path for big exports),
`stripe logs tail` captures, any provider's request log; and twice's own timeline files."""
