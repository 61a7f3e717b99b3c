"""Service APIs: botocore, the OpenAI and Anthropic SDKs, gRPC and google-api-core, and
cloud services' own error codes."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.classifier.corpus.cases import (
    TIMEOUT_S,
    Call,
    Case,
    Prepare,
    T,
    caught,
)
from tests.classifier.faults import FaultEnv

# --- botocore -----------------------------------------------------------------------------------

# One session per library for every AWS case: a session reads each service's model once, and
# every case still makes its own client.


@functools.cache
def botocore_session() -> Any:
    import botocore.session

    return botocore.session.get_session()


@functools.cache
def boto3_session() -> Any:
    import boto3

    return boto3.session.Session()


def boto_call(service: str, scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        from botocore.config import Config

        endpoint = env.url if scenario != "refused" else f"http://127.0.0.1:{env.closed}"
        client = botocore_session().create_client(
            service,
            region_name="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret",
            config=Config(
                retries={"total_max_attempts": 1},
                connect_timeout=TIMEOUT_S,
                read_timeout=TIMEOUT_S,
                s3={"addressing_style": "path"},
            ),
        )
        try:
            if service == "s3":
                yield lambda: client.get_object(Bucket="s", Key=scenario)
            else:
                yield lambda: client.get_item(TableName=scenario, Key={"k": {"S": "1"}})
        finally:
            client.close()

    return prepare


BOTOCORE = [
    Case(
        "botocore S3: NoSuchKey is resource_missing",
        boto_call("s3", "NoSuchKey"),
        T.RESOURCE_MISSING,
        {"provider_code": "NoSuchKey", "status_code": 404},
    ),
    Case(
        "botocore S3: SlowDown (a 503) is rate_limited",
        boto_call("s3", "SlowDown"),
        T.RATE_LIMITED,
        {"provider_code": "SlowDown", "signal": "provider_code"},
    ),
    Case(
        "botocore S3: AccessDenied is auth_failure", boto_call("s3", "AccessDenied"), T.AUTH_FAILURE
    ),
    Case(
        "botocore S3: ExpiredToken (a 400) is auth_failure",
        boto_call("s3", "ExpiredToken"),
        T.AUTH_FAILURE,
    ),
    Case(
        "botocore S3: InternalError is server_fault",
        boto_call("s3", "InternalError"),
        T.SERVER_FAULT,
    ),
    Case("botocore S3: read timeout", boto_call("s3", "slow"), T.TIMEOUT),
    Case("botocore S3: connection refused", boto_call("s3", "refused"), T.TRANSIENT),
    Case(
        "botocore DynamoDB: ProvisionedThroughputExceeded (a 400) is rate_limited",
        boto_call("dynamodb", "ProvisionedThroughputExceededException"),
        T.RATE_LIMITED,
        {"status_code": 400},
    ),
    Case(
        "botocore DynamoDB: ThrottlingException is rate_limited",
        boto_call("dynamodb", "ThrottlingException"),
        T.RATE_LIMITED,
    ),
    Case(
        "botocore DynamoDB: ResourceNotFoundException is resource_missing",
        boto_call("dynamodb", "ResourceNotFoundException"),
        T.RESOURCE_MISSING,
    ),
    Case(
        "botocore DynamoDB: ValidationException is invalid_input",
        boto_call("dynamodb", "ValidationException"),
        T.INVALID_INPUT,
    ),
    Case(
        "botocore DynamoDB: UnrecognizedClientException is auth_failure",
        boto_call("dynamodb", "UnrecognizedClientException"),
        T.AUTH_FAILURE,
    ),
    Case(
        "botocore DynamoDB: ExpiredTokenException is auth_failure",
        boto_call("dynamodb", "ExpiredTokenException"),
        T.AUTH_FAILURE,
    ),
    Case(
        "botocore DynamoDB: AccessDeniedException (a 400) is auth_failure",
        boto_call("dynamodb", "AccessDeniedException"),
        T.AUTH_FAILURE,
        {"provider_code": "AccessDeniedException", "status_code": 400, "retryable": False},
    ),
    Case(
        "botocore DynamoDB: InternalServerError is server_fault",
        boto_call("dynamodb", "InternalServerError"),
        T.SERVER_FAULT,
    ),
]


# --- OpenAI and Anthropic SDKs ------------------------------------------------------------------


def _sdk_base(env: FaultEnv, scenario: str) -> str:
    return env.at(scenario) if scenario != "refused" else f"http://127.0.0.1:{env.closed}"


def _openai(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import openai

        base = _sdk_base(env, scenario)
        with openai.OpenAI(
            api_key="sk-test", base_url=base, max_retries=0, timeout=TIMEOUT_S
        ) as client:
            yield lambda: client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "hi"}]
            )

    return prepare


def _anthropic(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import anthropic

        base = _sdk_base(env, scenario)
        with anthropic.Anthropic(
            api_key="sk-ant-test", base_url=base, max_retries=0, timeout=TIMEOUT_S
        ) as client:
            yield lambda: client.messages.create(
                model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )

    return prepare


LLM_SDKS = [
    Case(
        "openai: insufficient_quota (a 429) is auth_failure and not retryable",
        _openai("openai-quota"),
        T.AUTH_FAILURE,
        {"provider_code": "insufficient_quota", "retryable": False, "status_code": 429},
    ),
    Case(
        "openai: insufficient_quota without x-should-retry is still not retryable",
        _openai("openai-quota-no-flag"),
        T.AUTH_FAILURE,
        {"retryable": False},
    ),
    Case(
        "openai: rate_limit_exceeded honours retry-after-ms first",
        _openai("openai-rate"),
        T.RATE_LIMITED,
        {"retry_after": 0.25, "provider_code": "rate_limit_exceeded"},
    ),
    Case(
        "openai: model_not_found (a 404) is resource_missing",
        _openai("openai-model"),
        T.RESOURCE_MISSING,
        {"provider_code": "model_not_found"},
    ),
    Case("openai: invalid_api_key is auth_failure", _openai("openai-key"), T.AUTH_FAILURE),
    Case(
        "openai: a 400 invalid_request_error is invalid_input",
        _openai("openai-bad"),
        T.INVALID_INPUT,
        {"signal": "status"},
    ),
    Case("openai: server_error is server_fault", _openai("openai-server"), T.SERVER_FAULT),
    Case("openai: APITimeoutError is timeout", _openai("slow"), T.TIMEOUT),
    Case("openai: APIConnectionError is transient", _openai("refused"), T.TRANSIENT),
    Case(
        "anthropic: 529 overloaded_error is server_fault",
        _anthropic("anthropic-overloaded"),
        T.SERVER_FAULT,
        {"status_code": 529, "provider_code": "overloaded_error"},
    ),
    Case(
        "anthropic: rate_limit_error with retry-after",
        _anthropic("anthropic-rate"),
        T.RATE_LIMITED,
        {"retry_after": 20.0},
    ),
    Case(
        "anthropic: authentication_error is auth_failure",
        _anthropic("anthropic-auth"),
        T.AUTH_FAILURE,
    ),
    Case(
        "anthropic: invalid_request_error is invalid_input",
        _anthropic("anthropic-bad"),
        T.INVALID_INPUT,
    ),
    Case(
        "anthropic: not_found_error is resource_missing",
        _anthropic("anthropic-missing"),
        T.RESOURCE_MISSING,
    ),
    Case("anthropic: api_error is server_fault", _anthropic("anthropic-api"), T.SERVER_FAULT),
    Case("anthropic: timeout", _anthropic("slow"), T.TIMEOUT),
    Case("anthropic: connection refused", _anthropic("refused"), T.TRANSIENT),
]


# --- gRPC and google-api-core -------------------------------------------------------------------


def _grpc(status: str | None, *, target: str | None = None) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import grpc

        address = target.format(closed=env.closed) if target else env.grpc
        with grpc.insecure_channel(address) as channel:
            method = "/fault.Fault/Abort" if status else "/fault.Fault/Slow"
            call = channel.unary_unary(
                method, request_serializer=lambda s: s, response_deserializer=lambda b: b
            )
            yield lambda: call((status or "").encode(), timeout=TIMEOUT_S * 3)

    return prepare


def _google(status: str) -> Prepare:
    """google-api-core's exception for the gRPC error the call raises, as its wrappers raise it."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        from google.api_core import exceptions

        with _grpc(status)(env) as grpc_call:

            def call() -> None:
                raise exceptions.from_grpc_error(caught(grpc_call))

            yield call

    return prepare


def _google_http(scenario: str) -> Prepare:
    """google-api-core's exception for an HTTP error response, as its HTTP clients raise it."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import requests
        from google.api_core import exceptions

        url = env.at(scenario)
        with requests.Session() as session:

            def call() -> None:
                raise exceptions.from_http_response(session.get(url, timeout=TIMEOUT_S))

            yield call

    return prepare


GRPC = [
    *(
        Case(
            f"grpc: {status} is {category.value}",
            _grpc(status),
            category,
            {"provider_code": status, "signal": "status"},
        )
        for status, category in (
            ("NOT_FOUND", T.RESOURCE_MISSING),
            ("RESOURCE_EXHAUSTED", T.RATE_LIMITED),
            ("PERMISSION_DENIED", T.AUTH_FAILURE),
            ("UNAUTHENTICATED", T.AUTH_FAILURE),
            ("INVALID_ARGUMENT", T.INVALID_INPUT),
            ("FAILED_PRECONDITION", T.INVALID_INPUT),
            ("UNAVAILABLE", T.TRANSIENT),
            ("INTERNAL", T.SERVER_FAULT),
            ("UNKNOWN", T.SERVER_FAULT),
            ("ABORTED", T.TRANSIENT),
        )
    ),
    Case(
        "grpc: UNIMPLEMENTED is a server_fault that retrying cannot fix",
        _grpc("UNIMPLEMENTED"),
        T.SERVER_FAULT,
        {"retryable": False},
    ),
    Case(
        "grpc: a slow method past its deadline is DEADLINE_EXCEEDED, a timeout",
        _grpc(None),
        T.TIMEOUT,
        {"provider_code": "DEADLINE_EXCEEDED"},
    ),
    Case(
        "grpc: a refused connection is UNAVAILABLE, transient",
        _grpc("NOT_FOUND", target="127.0.0.1:{closed}"),
        T.TRANSIENT,
    ),
    Case(
        "google-api-core: from_grpc_error NOT_FOUND",
        _google("NOT_FOUND"),
        T.RESOURCE_MISSING,
        {"status_code": 404},
    ),
    Case(
        "google-api-core: DEADLINE_EXCEEDED beats its 504", _google("DEADLINE_EXCEEDED"), T.TIMEOUT
    ),
    Case("google-api-core: RESOURCE_EXHAUSTED", _google("RESOURCE_EXHAUSTED"), T.RATE_LIMITED),
    # google-api-core gives each class both an HTTP code and a gRPC status; the gRPC status is
    # the finer one (DEADLINE_EXCEEDED vs 504), so its ServiceUnavailable reads as UNAVAILABLE.
    Case(
        "google-api-core: from_http_response 503 is UNAVAILABLE, transient",
        _google_http("status-503"),
        T.TRANSIENT,
        {"status_code": 503, "provider_code": "UNAVAILABLE"},
    ),
    Case("google-api-core: from_http_response 429", _google_http("status-429"), T.RATE_LIMITED),
]


# --- cloud services' own codes (boto3 against the local fault endpoint) ---------------------------
#
# Each arrives with an HTTP status that says less (most are plain 400s; Lambda's KMS failure is
# a 502): the service's code decides.


def _aws(service: str, operation: str, **params: Any) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        from botocore.config import Config

        client = boto3_session().client(
            service,
            region_name="us-east-1",
            endpoint_url=env.url,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret",
            config=Config(
                retries={"total_max_attempts": 1},
                connect_timeout=TIMEOUT_S,
                read_timeout=TIMEOUT_S * 3,
                s3={"addressing_style": "path"},
            ),
        )
        try:
            yield lambda: getattr(client, operation)(**params)
        finally:
            client.close()

    return prepare


CLOUD = [
    Case(
        "boto3 S3: NoSuchBucket is resource_missing",
        _aws("s3", "get_object", Bucket="s", Key="NoSuchBucket"),
        T.RESOURCE_MISSING,
        {"provider_code": "NoSuchBucket"},
        why="the NoSuch family, through boto3",
    ),
    Case(
        "boto3 SQS: a missing queue (a 400, AWS.SimpleQueueService.NonExistentQueue) is missing",
        _aws("sqs", "get_queue_url", QueueName="sqs-missing-queue"),
        T.RESOURCE_MISSING,
        {"status_code": 400, "provider_code": "AWS.SimpleQueueService.NonExistentQueue"},
        why="x-amzn-query-error's namespaced code, read by its last part, beats the 400",
    ),
    Case(
        "boto3 SQS: InvalidSecurity on a 403 stays auth_failure",
        _aws("sqs", "get_queue_url", QueueName="sqs-invalid-security"),
        T.AUTH_FAILURE,
        {"status_code": 403},
        why="an 'Invalid*' code says only 'bad request' and does not override the 403",
    ),
    Case(
        "boto3 KMS: NotFoundException (a 400) is resource_missing",
        _aws("kms", "describe_key", KeyId="kms-missing-key"),
        T.RESOURCE_MISSING,
        {"provider_code": "NotFoundException", "status_code": 400},
        why="the service's own name for a missing key beats the 400",
    ),
    Case(
        "boto3 KMS: DisabledException (a 400) is auth_failure",
        _aws("kms", "encrypt", KeyId="kms-disabled-key", Plaintext=b"x"),
        T.AUTH_FAILURE,
        {"provider_code": "DisabledException"},
        why="a disabled key refuses use until someone enables it",
    ),
    Case(
        "boto3 Secrets Manager: ResourceNotFoundException (a 400) is resource_missing",
        _aws("secretsmanager", "get_secret_value", SecretId="secret-missing"),
        T.RESOURCE_MISSING,
        why="missing secret, sent as a 400",
    ),
    Case(
        "boto3 Secrets Manager: AccessDeniedException (a 400) is auth_failure",
        _aws("secretsmanager", "get_secret_value", SecretId="secret-denied"),
        T.AUTH_FAILURE,
        why="refused access, sent as a 400",
    ),
    Case(
        "boto3 Lambda: KMSAccessDeniedException (a 502) is auth_failure, not a server fault",
        _aws("lambda", "invoke", FunctionName="lambda-kms-denied"),
        T.AUTH_FAILURE,
        {"status_code": 502, "retryable": False},
        why="the function's role cannot use its key: a retry meets the same 502",
    ),
    Case(
        "boto3 Lambda: ResourceNotFoundException (a 404) is resource_missing",
        _aws("lambda", "get_function", FunctionName="lambda-missing"),
        T.RESOURCE_MISSING,
        why="x-amzn-ErrorType of a REST-JSON service",
    ),
    Case(
        "boto3 STS: InvalidIdentityToken (a 400) is auth_failure",
        _aws(
            "sts",
            "assume_role_with_web_identity",
            RoleArn="arn:aws:iam::123456789012:role/agent",
            RoleSessionName="agent",
            WebIdentityToken="sts-bad-token",
        ),
        T.AUTH_FAILURE,
        {"provider_code": "InvalidIdentityToken"},
        why="an exact entry before the generic 'Invalid' prefix",
    ),
    Case(
        "boto3 SNS: AuthorizationError is auth_failure",
        _aws("sns", "publish", TopicArn="sns-not-authorized", Message="hi"),
        T.AUTH_FAILURE,
        why="a query-protocol XML error",
    ),
    # Access denied beyond IAM and S3, each in its service's own spelling and mostly on a 400.
    Case(
        "boto3 KMS: AccessDeniedException (a 400) is auth_failure",
        _aws("kms", "decrypt", KeyId="kms-access-denied", CiphertextBlob=b"x"),
        T.AUTH_FAILURE,
        {"provider_code": "AccessDeniedException", "status_code": 400, "retryable": False},
        why="the key policy refuses the caller; the 400 alone would say invalid input",
    ),
    Case(
        "boto3 SNS: KMSAccessDenied (a 400) is auth_failure",
        _aws("sns", "publish", TopicArn="sns-kms-denied", Message="hi"),
        T.AUTH_FAILURE,
        {"provider_code": "KMSAccessDenied", "status_code": 400},
        why="the topic's key refuses SNS: a code ending in Denied",
    ),
    Case(
        "boto3 SQS: KMS.AccessDeniedException (KmsAccessDenied, a 400) is auth_failure",
        _aws("sqs", "get_queue_url", QueueName="sqs-kms-denied"),
        T.AUTH_FAILURE,
        {"status_code": 400},
    ),
    Case(
        "boto3 Redshift: AccessToClusterDenied (a 400) is auth_failure",
        _aws("redshift", "describe_clusters", ClusterIdentifier="redshift-cluster-denied"),
        T.AUTH_FAILURE,
        {"provider_code": "AccessToClusterDenied"},
    ),
    Case(
        "boto3 RDS: SNSNoAuthorization (a 400) is auth_failure",
        _aws("rds", "describe_db_instances", DBInstanceIdentifier="rds-sns-no-authorization"),
        T.AUTH_FAILURE,
        {"provider_code": "SNSNoAuthorization"},
        why="RDS may not publish to the topic: an authorisation, named inside the code",
    ),
    Case(
        "boto3 IAM: NoSuchEntity is resource_missing",
        _aws("iam", "get_user", UserName="iam-no-such-user"),
        T.RESOURCE_MISSING,
        why="IAM's own name for a missing user",
    ),
    Case(
        "boto3 EC2: InvalidParameterValue (a 400) is invalid_input",
        _aws("ec2", "describe_instances", InstanceIds=["ec2-bad-parameter"]),
        T.INVALID_INPUT,
        {"provider_code": "InvalidParameterValue", "status_code": 400},
        why="a generic code: the 400 says as much",
    ),
    Case(
        "boto3 EC2: InvalidInstanceID.NotFound (a 400) is resource_missing",
        _aws("ec2", "describe_instances", InstanceIds=["ec2-missing-instance"]),
        T.RESOURCE_MISSING,
        why="the NotFound suffix beats the Invalid prefix and the 400",
    ),
    Case(
        "boto3 EC2: UnauthorizedOperation is auth_failure",
        _aws("ec2", "describe_instances", InstanceIds=["ec2-unauthorized"]),
        T.AUTH_FAILURE,
        why="EC2's XML error shape",
    ),
]
