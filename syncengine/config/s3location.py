"""Where an S3 durable root is and how to reach it: `S3Location`, plain values only.

The configuration builds one from ``durable_root = "s3://BUCKET/PREFIX"`` and the
standard AWS variables and files (`from_environment`, given the mapping
syncengine.config reads: nothing here reads ``os.environ``).  No client library
is imported here, so the core parses an s3:// root without the ``s3`` extra.
Secrets never appear in `repr` or `describe`.  It lives with the configuration,
below ``durable/s3/``, because the configuration builds it and the S3 store,
``status`` and ``migrate`` read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

SCHEME = "s3://"


@attrs.frozen
class S3Location:
    """A bucket, a key prefix in it, and the endpoint and credentials to reach it."""

    bucket: str
    prefix: str = ""  # no leading or trailing "/"
    endpoint: str | None = None  # None: AWS's own, from the region
    region: str | None = None
    access_key_id: str | None = attrs.field(default=None, repr=False)
    secret_access_key: str | None = attrs.field(default=None, repr=False)
    session_token: str | None = attrs.field(default=None, repr=False)
    profile: str | None = None  # where the credentials came from (for messages only)

    def child(self, sub: str) -> S3Location:
        """The location of `sub` below this prefix (an adapter's durable directory)."""
        sub = sub.strip("/")
        prefix = f"{self.prefix}/{sub}" if self.prefix and sub else (self.prefix or sub)
        return attrs.evolve(self, prefix=prefix)

    def url(self, key: str = "") -> str:
        """``s3://bucket/prefix/key``: for messages (no endpoint, no secret)."""
        path = "/".join(p for p in (self.prefix, key) if p)
        return f"{SCHEME}{self.bucket}/{path}" if path else f"{SCHEME}{self.bucket}"

    def identity(self) -> str:
        """What makes this bucket prefix one store and not another (``lease.json``'s root):
        the URL and the endpoint that serves it (AWS's bucket names are global)."""
        return f"{self.url()} at {self.endpoint or 'AWS'}"

    def describe(self) -> str:
        """The backend, endpoint and bucket for `status` (never a secret)."""
        endpoint = self.endpoint or f"AWS ({self.region or 'default region'})"
        return f"s3 endpoint={endpoint} bucket={self.bucket} prefix={self.prefix or '/'}"


def virtual_root(where: S3Location) -> Path:
    """The path standing for the bucket's prefix in the Config (``/s3:/BUCKET/PREFIX``):
    adapters' durable paths are under it, and the engine maps them to keys (`child`)."""
    return Path("/s3:", where.bucket, *filter(None, where.prefix.split("/")))


def bucket_root(where: S3Location) -> Path:
    """The path standing for the whole bucket (``/s3:/BUCKET``): `virtual_root` without
    the prefix; a legacy tree beside the durable prefix (migrate's `home`) is under it."""
    return Path("/s3:", where.bucket)


def in_bucket(where: S3Location | None, path: Path) -> bool:
    """Whether `path` stands for keys in the bucket of `where` (None: no bucket)."""
    return where is not None and (path == bucket_root(where) or bucket_root(where) in path.parents)


def virtual_path(url: str, where: S3Location | None) -> Path:
    """``s3://BUCKET/KEY`` in the bucket of an s3:// durable root -> its path under
    `bucket_root` (config key ``home``); ValueError when it names another bucket or the
    durable root is not a bucket."""
    bucket, prefix = parse_url(url)
    if where is None or bucket != where.bucket:
        raise ValueError(
            f"{url} is in a bucket: give durable_root as s3://{bucket}/... (the same bucket)"
        )
    return Path(bucket_root(where), *filter(None, prefix.split("/")))


def display(where: S3Location | None, path: str | os.PathLike[str]) -> str:
    """A durable path as every message writes it: the ``s3://`` URL of the keys it stands
    for in the bucket of `where`, else the path itself (never ``/s3:/BUCKET/...``)."""
    if where is None or not in_bucket(where, Path(path)):
        return os.fspath(path)
    rel = Path(path).relative_to(bucket_root(where)).as_posix()
    return f"{SCHEME}{where.bucket}" if rel == "." else f"{SCHEME}{where.bucket}/{rel}"


def shown(where: S3Location | None, text: str) -> str:
    """`text` with each path under `bucket_root` written as `display` writes it (a message
    composed before the paths could be formatted one by one)."""
    if where is None:
        return text
    root = str(bucket_root(where))
    return text.replace(f"{root}/", f"{display(where, root)}/").replace(root, display(where, root))


def parse_url(url: str) -> tuple[str, str]:
    """``s3://BUCKET/PREFIX`` -> (bucket, prefix); ValueError when it is not one."""
    if not url.startswith(SCHEME):
        raise ValueError(f"{url!r} does not start with {SCHEME}")
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket (s3://BUCKET/PREFIX)")
    return bucket, prefix.strip("/")


def is_s3(url: str) -> bool:
    return url.startswith(SCHEME)


def from_environment(url: str, env: Mapping[str, str]) -> S3Location:
    """The location of ``s3://BUCKET/PREFIX`` with endpoint, region and credentials from
    the standard AWS variables in `env` (the mapping syncengine.config reads), then the
    profile (``AWS_PROFILE``, else ``default``) in the shared credentials and config
    files, as the AWS CLI resolves them.  ValueError: not an s3:// URL, or a file that
    cannot be parsed."""
    bucket, prefix = parse_url(url)
    name = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    home = env.get("HOME") or "~"
    profile = {
        **_profile(
            env.get("AWS_CONFIG_FILE") or f"{home}/.aws/config",
            "default" if name == "default" else f"profile {name}",
        ),
        **_profile(env.get("AWS_SHARED_CREDENTIALS_FILE") or f"{home}/.aws/credentials", name),
    }

    def pick(*keys: str) -> str | None:
        for key in keys:
            value = env.get(key) if key.isupper() else profile.get(key)
            if value:
                return value
        return None

    env_keys = bool(env.get("AWS_ACCESS_KEY_ID"))  # a key pair comes whole from one source
    return S3Location(
        bucket,
        prefix,
        endpoint=pick("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "endpoint_url"),
        region=pick("AWS_REGION", "AWS_DEFAULT_REGION", "region"),
        access_key_id=pick("AWS_ACCESS_KEY_ID") if env_keys else pick("aws_access_key_id"),
        secret_access_key=(
            pick("AWS_SECRET_ACCESS_KEY") if env_keys else pick("aws_secret_access_key")
        ),
        session_token=pick("AWS_SESSION_TOKEN") if env_keys else pick("aws_session_token"),
        profile=None if env_keys else name,
    )


def _profile(path: str, section: str) -> dict[str, str]:
    import configparser  # here, not at the top: every CLI start imports this module

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(os.path.expanduser(path), encoding="utf-8")
    except configparser.Error as exc:
        raise ValueError(f"cannot parse {path}: {str(exc).splitlines()[0]}") from exc
    return dict(parser[section]) if parser.has_section(section) else {}
