"""An SQS work queue for agent runs: moto's `ThreadedMotoServer` spoken to with boto3.

Workers receive a run, process it and delete the message. A worker that dies never deletes it,
so after the visibility timeout SQS hands it out again (`ApproximateReceiveCount` 2). Every
`receive_message` answer that carried messages is appended to a JSON lines file the way a consumer
logs it: `{"received_at": ISO-8601 (the worker's clock), "worker", "queue", "message": <the
boto3 response as returned: {"Messages": [{"MessageId", "ReceiptHandle", "MD5OfBody", "Body",
"Attributes": {"ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp", "SentTimestamp",
...}}], "ResponseMetadata": {...}}>}`. A message alone does not say when THIS receive happened
(only the first receive), hence `received_at`. moto reads the time through `datetime`, so
time-machine moves it too.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

QUEUE_NAME = "billing-agent-runs"
REGION = "us-east-1"


class RunQueue:
    system = "aws_sqs"
    name = QUEUE_NAME

    def __init__(self, log_path: Path, *, visibility_timeout: int = 360) -> None:
        self.log_path = log_path
        self.visibility_timeout = visibility_timeout
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._client: Any = None
        self.url = ""

    def __enter__(self) -> RunQueue:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log on stderr
        self._server.start()
        host, port = self._server.get_host_and_port()
        self._client = boto3.client(
            "sqs",
            endpoint_url=f"http://{host}:{port}",
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",  # noqa: S106 - moto's dummy credentials
        )
        created = self._client.create_queue(
            QueueName=QUEUE_NAME,
            Attributes={"VisibilityTimeout": str(self.visibility_timeout)},
        )
        self.url = created["QueueUrl"]
        self.log_path.write_text("", encoding="utf-8")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop()

    def send(self, thread_id: str, text: str) -> str:
        body = json.dumps({"thread_id": thread_id, "input": text})
        sent = self._client.send_message(QueueUrl=self.url, MessageBody=body)
        return str(sent["MessageId"])

    def receive(self, worker: str) -> dict[str, Any] | None:
        """One short poll for one message; the answer is logged when it carries a message."""
        received_at = datetime.now(UTC).isoformat(timespec="microseconds")
        answer = self._client.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=1,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        messages = answer.get("Messages") or []
        if not messages:
            return None
        record = {
            "received_at": received_at,
            "worker": worker,
            "queue": self.url,
            "message": answer,
        }
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        message: dict[str, Any] = messages[0]
        return message

    def delete(self, message: dict[str, Any]) -> None:
        self._client.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])
