"""Queue receives: what a consumer got from the queue (SQS receive_message results)."""
