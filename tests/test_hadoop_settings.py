"""Spark's Hadoop settings for S3A, ABFS and GCS, as the options of our filesystems
(`format/storage/hadoop.py`): each connector's keys and lookup order, our rootOptions over
them, and a clear refusal where a setting has no Python equivalent."""

from __future__ import annotations

import pytest

from state_store.errors import UnsupportedStorageError
from state_store.format.storage import HDFS_REFUSAL, open_storage, storage_kind
from state_store.format.storage.hadoop import PREFIXES, hadoop_options, options_for

ACCOUNT = "acct.dfs.core.windows.net"


def test_s3a_credentials_endpoint_and_per_bucket_keys() -> None:
    hadoop = {"fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK",
              "fs.s3a.session.token": "ST", "fs.s3a.endpoint": "minio.local:9000",
              "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.path.style.access": "true",
              "fs.s3a.endpoint.region": "eu-west-1",
              "fs.s3a.bucket.special.access.key": "BUCKET-AK"}
    assert hadoop_options("s3a://data/state", hadoop) == {
        "key": "AK", "secret": "SK", "token": "ST", "endpoint_url": "http://minio.local:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}}}
    assert hadoop_options("s3a://special/state", hadoop)["key"] == "BUCKET-AK"
    assert hadoop_options("s3a://b/x", {"fs.s3a.endpoint": "https://s3.example"})[
        "endpoint_url"] == "https://s3.example"
    assert hadoop_options("s3a://b/x", {"fs.s3a.aws.credentials.provider":
                                        "org.apache.hadoop.fs.s3a."
                                        "AnonymousAWSCredentialsProvider"}) == {"anon": True}
    assert hadoop_options("s3://b/x", hadoop) == {}  # s3:// is not S3A's scheme


def test_abfs_shared_key_sas_and_oauth_per_account() -> None:
    url = f"abfss://container@{ACCOUNT}/state"
    assert hadoop_options(url, {f"fs.azure.account.key.{ACCOUNT}": "KEY",
                                "fs.azure.account.key": "OTHER"}) == {
        "account_name": "acct", "account_key": "KEY"}
    assert hadoop_options(url, {"fs.azure.account.auth.type": "SAS",
                                f"fs.azure.sas.fixed.token.{ACCOUNT}": "sv=1&sig=x"}) == {
        "account_name": "acct", "sas_token": "sv=1&sig=x"}
    oauth = {f"fs.azure.account.auth.type.{ACCOUNT}": "OAuth",
             "fs.azure.account.oauth.provider.type":
                 "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
             "fs.azure.account.oauth2.client.id": "CID",
             "fs.azure.account.oauth2.client.secret": "CSECRET",
             "fs.azure.account.oauth2.client.endpoint":
                 "https://login.microsoftonline.com/TENANT/oauth2/token"}
    assert hadoop_options(url, oauth) == {"account_name": "acct", "client_id": "CID",
                                          "client_secret": "CSECRET", "tenant_id": "TENANT"}
    emulator = {f"fs.azure.account.key.{ACCOUNT}": "KEY", "fs.azure.abfs.endpoint": "h:1",
                "fs.azure.always.use.https": "false"}
    assert hadoop_options(url, emulator) == {"connection_string": (
        "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=KEY;"
        "BlobEndpoint=http://h:1/acct;")}
    assert hadoop_options("az://container/state", emulator) == {}  # no account in the URL


@pytest.mark.parametrize("settings, named", [
    ({"fs.azure.account.auth.type": "SAS"}, "fs.azure.sas.fixed.token"),
    ({"fs.azure.account.auth.type": "OAuth",
      "fs.azure.account.oauth.provider.type": "com.example.MyProvider"}, "com.example.MyProvider"),
    ({"fs.azure.account.auth.type": "Custom"}, "fs.azure.account.auth.type Custom"),
])
def test_abfs_settings_without_a_python_equivalent_are_refused_by_name(
        settings: dict[str, str], named: str) -> None:
    with pytest.raises(UnsupportedStorageError, match=named):
        hadoop_options(f"abfss://c@{ACCOUNT}/x", settings)


def test_gcs_keyfile_endpoint_and_anonymous() -> None:
    assert hadoop_options("gs://b/x", {
        "fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE", "fs.gs.project.id": "p",
        "fs.gs.auth.service.account.json.keyfile": "/etc/key.json",
        "fs.gs.storage.root.url": "https://gcs.example/"}) == {
        "project": "p", "token": "/etc/key.json", "endpoint_url": "https://gcs.example"}
    assert hadoop_options("gcs://b/x", {"fs.gs.auth.type": "UNAUTHENTICATED"}) == {
        "token": "anon"}
    assert hadoop_options("gs://b/x", {"fs.gs.auth.type": "APPLICATION_DEFAULT"}) == {
        "token": "google_default"}


def test_own_options_override_hadoop_ones_key_by_key() -> None:
    hadoop = {"fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK"}
    assert options_for("s3a://b/x", hadoop, {"secret": "MINE"}) == {"key": "AK",
                                                                     "secret": "MINE"}
    assert options_for("file:/tmp/x", hadoop, None) == {}


def test_the_shim_sends_what_the_mapping_reads() -> None:
    """The Scala side sends the keys under these prefixes (StoreLocation.FilesystemPrefixes)."""
    from state_store.driver.bridge import shim_dir

    scala = (shim_dir() / "common/io/pyrocks/statestore/StoreLocation.scala").read_text()
    listed = scala.split("FilesystemPrefixes: Seq[String] = Seq(", 1)[1].split(")", 1)[0]
    assert tuple(p.strip().strip('"') for p in listed.split(",")) == PREFIXES


def test_schemes_of_one_service_are_one_kind_and_hdfs_is_refused_with_why() -> None:
    assert storage_kind("s3a://b/x") == storage_kind("s3://b/x") == "s3"
    assert storage_kind("abfss://c@a.dfs.core.windows.net/x") == storage_kind("az://c/x")
    assert storage_kind("gcs://b/x") == storage_kind("gs://b/x") == "gcs"
    with pytest.raises(UnsupportedStorageError, match="create-if-absent") as refusal:
        open_storage("hdfs://namenode:8020/state")
    assert HDFS_REFUSAL in str(refusal.value) and "rootUrl" in str(refusal.value)
