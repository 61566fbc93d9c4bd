"""Object-store failures (S3 API) said in one line that names the setting to fix.

s3fs and botocore report an unreachable endpoint, missing credentials or a missing bucket
as a deep traceback (``EndpointConnectionError``, ``NoCredentialsError``, a
``FileNotFoundError`` caused by ``NoSuchBucket``). :func:`object_store_error` recognises
those in an exception's chain and returns a :class:`~ticktensor.errors.StoreError` whose
message says what was tried and which setting changes it; anything else is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from ticktensor.errors import StoreError

__all__ = ["object_store_error"]

_ENDPOINT_HELP: Final = (
    "set AWS_ENDPOINT_URL=http://HOST:PORT or pass "
    'storage_options={"client_kwargs": {"endpoint_url": "http://HOST:PORT"}}'
)
_CREDENTIALS_HELP: Final = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or pass "
    'storage_options={"key": ..., "secret": ...} ({"anon": True} for a public bucket)'
)
# botocore exception classes, by name: botocore is optional (only s3fs brings it).
_UNREACHABLE: Final = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "ProxyConnectionError"}
)
_NO_CREDENTIALS: Final = frozenset(
    {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}
)
# S3 error codes a server answers with.
_DENIED: Final = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
    }
)


def object_store_error(
    exc: BaseException,
    url: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> StoreError | None:
    """A one-line :class:`~ticktensor.errors.StoreError` for an object-store failure, or ``None``.

    Parameters
    ----------
    exc
        The exception raised while talking to the store; its ``__cause__`` and
        ``__context__`` chain is searched for botocore errors.
    url
        The store or file URL that was being used (named in the message), if known.
    storage_options
        The fsspec options the filesystem was made with (for the endpoint it used).

    Returns
    -------
    StoreError or None
        For an unreachable endpoint, missing or rejected credentials and a missing
        bucket; ``None`` for every other exception (the caller re-raises it).

    Examples
    --------
    >>> object_store_error(ValueError("not an object store problem")) is None
    True
    """
    options = storage_options or {}
    for cause in _chain(exc):
        if not type(cause).__module__.startswith("botocore"):
            continue
        name = type(cause).__name__
        where = f"{url}: " if url else ""
        if name in _UNREACHABLE:
            endpoint = _endpoint(cause, options)
            return StoreError(
                f"{where}cannot reach the object store at {endpoint} ({_reason(cause)}); "
                f"{_ENDPOINT_HELP}"
            )
        if name in _NO_CREDENTIALS:
            return StoreError(f"{where}no object store credentials found; {_CREDENTIALS_HELP}")
        code, status = _error_code(cause)
        if code == "NoSuchBucket":
            bucket = _bucket(cause, url)
            endpoint = _endpoint(cause, options)
            return StoreError(
                f"{where}bucket {bucket!r} does not exist at {endpoint}; create it "
                f"(aws s3 mb s3://{bucket}) or name an existing bucket in the URL"
            )
        if code in _DENIED or status == 403:  # a HEAD request's 403 has no code
            return StoreError(
                f"{where}the object store denied access ({code}): the credentials are wrong "
                f"or lack permission; {_CREDENTIALS_HELP}"
            )
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes and contexts, each once."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _error_code(exc: BaseException) -> tuple[str | None, int | None]:
    """The S3 error code and HTTP status of a botocore ``ClientError``."""
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None, None
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return (
        None if code is None else str(code),
        status if isinstance(status, int) else None,
    )


def _bucket(exc: BaseException, url: str | None) -> str:
    response: Any = getattr(exc, "response", None)
    named = response.get("Error", {}).get("BucketName") if isinstance(response, dict) else None
    if named:
        return str(named)
    return urlsplit(url).netloc if url else "?"


def _endpoint(exc: BaseException, options: Mapping[str, Any]) -> str:
    """The endpoint a request went to: from the error, else the configured one."""
    kwargs: Any = getattr(exc, "kwargs", None)
    target = kwargs.get("endpoint_url") if isinstance(kwargs, dict) else None
    if target:
        parts = urlsplit(str(target))
        return f"{parts.scheme}://{parts.netloc}"
    client_kwargs = options.get("client_kwargs")
    configured = (
        options.get("endpoint_url")
        or (client_kwargs.get("endpoint_url") if isinstance(client_kwargs, Mapping) else None)
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    return str(configured) if configured else "the default AWS endpoint"


def _reason(exc: BaseException) -> str:
    """The innermost cause's message: 'Connection refused', a DNS failure, a timeout."""
    inner = _chain(exc)[-1]
    text = str(inner) or type(inner).__name__
    return text if len(text) <= 120 else text[:117] + "..."
