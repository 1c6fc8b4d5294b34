"""Spark's Hadoop filesystem settings, as the options of the Python filesystem for a URL.

A query whose state is on s3a://, abfss:// or gs:// has its credentials and endpoint in
Spark's Hadoop configuration already (`spark.hadoop.fs.s3a.access.key`, ...). The shim
sends the worker the `fs.s3a.*`, `fs.azure.*` and `fs.gs.*` entries of the query's Hadoop
configuration over its socket (never in argv, logs or durable records); this module maps
the ones with a meaning here to s3fs, adlfs and gcsfs options. A user's own `rootOptions`
are merged on top, key by key (`options_for`).

Each connector's lookup order is kept: S3A's per-bucket keys (`fs.s3a.bucket.<b>.<key>`)
before the global ones, ABFS's per-account keys (`<key>.<account>.dfs.core.windows.net`)
before the account-less ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import fsspec

from ...errors import UnsupportedStorageError

PREFIXES = ("fs.s3a.", "fs.azure.", "fs.gs.")  # what the shim sends (also in Scala)
_OAUTH_CLIENT_CREDENTIALS = "ClientCredsTokenProvider"
_OAUTH_MANAGED_IDENTITY = "MsiTokenProvider"


def options_for(url: str, hadoop: Mapping[str, str],
                own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The filesystem options of `url`: what the Hadoop settings give it, then `own`
    (rootOptions) over them."""
    return {**hadoop_options(url, hadoop), **(own or {})}


def hadoop_options(url: str, hadoop: Mapping[str, str]) -> dict[str, Any]:
    """The fsspec options the Hadoop settings give `url`'s filesystem ({} for others)."""
    protocol = fsspec.core.split_protocol(url)[0]
    if not hadoop or protocol is None:
        return {}
    if protocol == "s3a":
        return _s3a(urlparse(url).netloc, hadoop)
    if protocol in ("abfs", "abfss", "az"):
        return _azure(urlparse(url).netloc, hadoop)
    if protocol in ("gs", "gcs"):
        return _gcs(hadoop)
    return {}


def _s3a(bucket: str, hadoop: Mapping[str, str]) -> dict[str, Any]:
    def get(key: str) -> str | None:
        return hadoop.get(f"fs.s3a.bucket.{bucket}.{key}") or hadoop.get(f"fs.s3a.{key}")

    options: dict[str, Any] = {}
    for key, option in (("access.key", "key"), ("secret.key", "secret"),
                        ("session.token", "token")):
        if value := get(key):
            options[option] = value
    if "AnonymousAWSCredentialsProvider" in (get("aws.credentials.provider") or ""):
        options["anon"] = True
    if endpoint := get("endpoint"):
        if "://" not in endpoint:
            secure = (get("connection.ssl.enabled") or "true").lower() != "false"
            endpoint = f"{'https' if secure else 'http'}://{endpoint}"
        options["endpoint_url"] = endpoint
    if region := get("endpoint.region") or get("region"):
        options["client_kwargs"] = {"region_name": region}
    if (get("path.style.access") or "").lower() == "true":
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return options


def _azure(netloc: str, hadoop: Mapping[str, str]) -> dict[str, Any]:
    """ABFS settings for `container@account.dfs.core.windows.net` (or `.blob.`)."""
    host = netloc.rpartition("@")[2]
    account = host.split(".", 1)[0] if "." in host else ""
    if not account:
        return {}  # az://container/path: the account comes from rootOptions alone
    names = dict.fromkeys((host, f"{account}.dfs.core.windows.net",
                           f"{account}.blob.core.windows.net"))

    def get(key: str) -> str | None:
        for name in names:
            if (value := hadoop.get(f"{key}.{name}")) is not None:
                return value
        return hadoop.get(key)

    auth = (get("fs.azure.account.auth.type") or "SharedKey").strip()
    credentials = _azure_credentials(auth, get)
    if credentials is None:
        return {}
    if endpoint := get("fs.azure.abfs.endpoint"):  # an emulator, or a private endpoint
        scheme = "https" if (get("fs.azure.always.use.https") or "true") != "false" else "http"
        secret = (f"AccountKey={credentials['account_key']}" if "account_key" in credentials
                  else f"SharedAccessSignature={credentials.get('sas_token', '').lstrip('?')}")
        return {"connection_string": f"DefaultEndpointsProtocol={scheme};AccountName={account};"
                                     f"{secret};BlobEndpoint={scheme}://{endpoint}/{account};"}
    return {"account_name": account, **credentials}


def _azure_credentials(auth: str, get: Any) -> dict[str, Any] | None:
    if auth == "SharedKey":
        key = get("fs.azure.account.key")
        return {"account_key": key} if key else None
    if auth == "SAS":
        token = get("fs.azure.sas.fixed.token")
        if not token:
            raise UnsupportedStorageError(
                "fs.azure.account.auth.type is SAS, but no fs.azure.sas.fixed.token is set: a "
                "SAS token provider class (fs.azure.sas.token.provider.type) runs in the JVM "
                "only; set the token itself, or rootOptions {\"sas_token\": ...}")
        return {"sas_token": token}
    if auth == "OAuth":
        provider = get("fs.azure.account.oauth.provider.type") or ""
        if provider.endswith(_OAUTH_CLIENT_CREDENTIALS):
            endpoint = get("fs.azure.account.oauth2.client.endpoint") or ""
            tenant = urlparse(endpoint).path.strip("/").split("/", 1)[0]
            return {"client_id": get("fs.azure.account.oauth2.client.id"),
                    "client_secret": get("fs.azure.account.oauth2.client.secret"),
                    "tenant_id": tenant}
        if provider.endswith(_OAUTH_MANAGED_IDENTITY):
            return {"anon": False}  # adlfs then asks Azure's default credential chain
        raise UnsupportedStorageError(
            f"fs.azure.account.oauth.provider.type {provider or '(unset)'} has no Python "
            f"equivalent here: use {_OAUTH_CLIENT_CREDENTIALS} or {_OAUTH_MANAGED_IDENTITY}, "
            "or give adlfs's options in rootOptions")
    raise UnsupportedStorageError(
        f"fs.azure.account.auth.type {auth} is not one this store maps (SharedKey, SAS, "
        "OAuth); give adlfs's options in rootOptions")


def _gcs(hadoop: Mapping[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if project := hadoop.get("fs.gs.project.id"):
        options["project"] = project
    if endpoint := hadoop.get("fs.gs.storage.root.url"):
        options["endpoint_url"] = endpoint.rstrip("/")
    auth = (hadoop.get("fs.gs.auth.type") or "").upper()
    keyfile = hadoop.get("fs.gs.auth.service.account.json.keyfile")
    if auth == "UNAUTHENTICATED" or (hadoop.get("fs.gs.auth.null.enable") or "") == "true":
        options["token"] = "anon"
    elif keyfile and auth in ("", "SERVICE_ACCOUNT_JSON_KEYFILE"):
        options["token"] = keyfile
    elif auth in ("APPLICATION_DEFAULT", "COMPUTE_ENGINE"):
        options["token"] = "google_default" if auth == "APPLICATION_DEFAULT" else "cloud"
    return options
