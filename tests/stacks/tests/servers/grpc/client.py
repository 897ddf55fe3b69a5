"""A second, independent gRPC client (grpcio, the C-core implementation)
for tests/stacks/tests/servers/grpc.rs: calls grpc.health.v1.Health/Check on the server at
argv[1] until a call is refused, then prints, as one JSON line, what a
grpcio user sees: the status code, the RetryInfo delay in nanoseconds, the
QuotaFailure subjects and the RateLimit metadata."""

import json
import sys

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


def main():
    target = sys.argv[1]
    admitted = 0
    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=None,
            response_deserializer=None,
        )
        while True:
            try:
                # An empty HealthCheckRequest: every field at its default.
                check(b"", timeout=10)
                admitted += 1
            except grpc.RpcError as refused:
                report = {
                    "admitted": admitted,
                    "code": refused.code().name,
                    "metadata": {k: v for k, v in refused.trailing_metadata() or ()
                                 if not k.endswith("-bin")},
                }
                status = rpc_status.from_call(refused)
                for detail in status.details if status else ():
                    if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                        info = error_details_pb2.RetryInfo()
                        detail.Unpack(info)
                        delay = info.retry_delay
                        report["retry_delay_ns"] = delay.seconds * 10**9 + delay.nanos
                    if detail.Is(error_details_pb2.QuotaFailure.DESCRIPTOR):
                        failure = error_details_pb2.QuotaFailure()
                        detail.Unpack(failure)
                        report["subjects"] = [v.subject for v in failure.violations]
                print(json.dumps(report))
                return


if __name__ == "__main__":
    main()
