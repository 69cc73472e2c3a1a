"""Fetch a dataset file once, verified by sha256: from a local
mirror, the cache, or its URL.

Every file the book reads is listed in ``REGISTRY`` by name, each with one or more
``Resource`` alternatives (a file's place in the mirror/cache, its sha256, its
canonical URL). ``fetch(name)`` returns the path of a verified copy, looking in this
order:

1. the mirror folder (``mirror=`` argument, else ``AT_DATA_MIRROR``), laid
   out like the cache (``multi30k/``, ``imdb/``, ``chars/``); a mirror file
   is verified, never copied;
2. the cache folder (``AT_CACHE_DIR``, default ``~/.cache/annotated_transformer``);
3. the canonical URL, downloaded into a temporary file next to its final place,
   verified, and only then renamed into the cache (``os.replace`` is atomic), so a
   partial or corrupted download never sits in the cache under the real name. Failed
   attempts are retried.

GPT-2's published files (:data:`GPT2_FILES`, 124M, from Hugging Face at a fixed
revision) are not a dataset: :func:`gpt2_folder` finds them verified in
``AT_GPT2_DIR`` (default the cache's ``gpt2/``) and downloads them only when asked.

Some hashes are of the decompressed bytes (``content="gzip"`` or
``"zip:<member>"``): the mirror keeps Tiny Shakespeare gzip'd, and enwik8's
published hash is of the unzipped file.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import shutil
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from annotated_transformer import paths as settings
from annotated_transformer.files import atomic_write

CHUNK = 1 << 20
HINT = (
    "Put a verified copy in a mirror folder laid out like the cache (multi30k/, "
    "imdb/, chars/) and pass it with --data-dir or set AT_DATA_MIRROR, or check "
    "your network and retry."
)


class ChecksumError(ValueError):
    """A file's sha256 differs from the registry's: corrupted,
    truncated or a different file."""


class DownloadError(OSError):
    """A file could not be obtained from the mirror, the cache or its URL."""


@dataclass(frozen=True)
class Resource:
    """One verifiable file.

    path:    its place relative to the mirror and cache folders,
             e.g. ``multi30k/val.en.gz``
    sha256:  hex digest of its content, as selected by ``content``
    url:     canonical download URL; None for files found only in a mirror
    content: what ``sha256`` hashes: ``"raw"`` the file itself, ``"gzip"`` its
             gunzipped bytes, ``"zip:<member>"`` one member of a zip archive
    """

    path: str
    sha256: str
    url: str | None = None
    content: str = "raw"


def sha256_of(path: Path, content: str = "raw") -> str:
    """Hex sha256 of a file's bytes (``raw``), its gunzipped bytes, or
    one zip member's bytes."""
    digest = hashlib.sha256()
    with _open_content(Path(path), content) as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _open_content(path: Path, content: str):
    if content == "raw":
        return open(path, "rb")
    if content == "gzip":
        return gzip.open(path, "rb")
    if content.startswith("zip:"):
        archive = zipfile.ZipFile(path)
        return archive.open(content.removeprefix("zip:"))
    raise ValueError(
        f"content={content!r} is not one of 'raw', 'gzip', 'zip:<member>'"
    )


def verify(path: Path, resource: Resource) -> None:
    """Raise ``ChecksumError`` unless ``path`` hashes to ``resource.sha256``."""
    try:
        actual = sha256_of(path, resource.content)
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as error:
        # A truncated gzip/zip cannot even be decompressed: same
        # verdict as a wrong hash.
        raise ChecksumError(
            f"{path} cannot be read as {resource.content!r} content ({error}); "
            "it is corrupted or truncated"
        ) from error
    if actual != resource.sha256:
        raise ChecksumError(
            f"{path} has sha256 {actual} but {resource.path} should have "
            f"{resource.sha256} ({resource.content} content): the file is "
            "corrupted, truncated or another version"
        )


def fetch(
    name: str | Resource | Sequence[Resource],
    *,
    mirror: str | Path | None = None,
    cache: str | Path | None = None,
    retries: int = 3,
    timeout: float = 60.0,
) -> Path:
    """Path of a verified copy of a registry entry (by name)
    or of explicit resource(s).

    Alternatives are tried in order in the mirror, then in the cache, then
    downloaded (the first alternative with a URL). ``mirror`` defaults to
    ``settings.data_mirror()``, ``cache`` to ``settings.cache_dir()``.
    """
    alternatives = _alternatives(name)
    mirror = (
        Path(mirror).expanduser() if mirror is not None else settings.data_mirror()
    )
    cache = Path(cache).expanduser() if cache is not None else settings.cache_dir()
    if mirror is not None and not mirror.is_dir():
        raise FileNotFoundError(
            f"the data mirror {mirror} is not a folder: fix --data-dir or "
            "AT_DATA_MIRROR, or unset it to download into the cache"
        )
    if mirror is not None:
        for resource in alternatives:
            candidate = mirror / resource.path
            if candidate.is_file():
                # a bad mirror file is an error, not a fallback
                try:
                    verify(candidate, resource)
                except ChecksumError as error:
                    raise ChecksumError(
                        f"{error}. Replace it in the mirror with a good copy (see "
                        "shared/data/README.md), or remove it to use the cache or "
                        "download."
                    ) from None
                return candidate
    for resource in alternatives:
        cached = cache / resource.path
        if cached.is_file():
            try:
                verify(cached, resource)
                return cached
            except ChecksumError:
                # only verified files are renamed in, but the disk may lie
                cached.unlink()
    downloadable = [r for r in alternatives if r.url is not None]
    if not downloadable:
        where = (
            f"mirror {mirror}"
            if mirror is not None
            else "no mirror (AT_DATA_MIRROR unset)"
        )
        wanted = " or ".join(r.path for r in alternatives)
        raise DownloadError(
            f"{wanted} is not in the {where} nor in the cache {cache}. {HINT}"
        )
    return download(downloadable[0], cache / downloadable[0].path, retries, timeout)


def _alternatives(
    name: str | Resource | Sequence[Resource],
) -> tuple[Resource, ...]:
    if isinstance(name, Resource):
        return (name,)
    if isinstance(name, str):
        if name not in REGISTRY:
            raise ValueError(
                f"unknown dataset file {name!r}; known: {', '.join(REGISTRY)}"
            )
        return REGISTRY[name]
    return tuple(name)


def download(
    resource: Resource, target: Path, retries: int = 3, timeout: float = 60.0
) -> Path:
    """Download ``resource.url`` to ``target`` atomically, verified;
    retry up to ``retries``."""
    if retries < 1:
        raise ValueError(f"retries={retries} must be at least 1")
    failures = []
    for attempt in range(1, retries + 1):
        try:  # verified before the rename: the cache holds only verified files
            return atomic_write(
                target,
                lambda out: _stream(resource.url, out, timeout),
                check=lambda part: verify(part, resource),
            )
        except (OSError, http.client.HTTPException, ChecksumError) as error:
            failures.append(f"attempt {attempt}: {error}")
        if attempt < retries:
            time.sleep(min(0.5 * 2.0 ** (attempt - 1), 8.0))
    details = "\n  ".join(failures)
    raise DownloadError(
        f"could not download {resource.url} (sha256 {resource.sha256}) "
        f"in {retries} attempt(s):\n  {details}\n{HINT}"
    )


def _stream(url: str, out, timeout: float) -> None:
    """Copy ``url`` into the open file ``out``; raise ``OSError`` if
    fewer bytes than announced."""
    request = urllib.request.Request(
        url, headers={"User-Agent": "annotated-transformer"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        shutil.copyfileobj(response, out, CHUNK)
        announced = response.headers.get("Content-Length")
    if announced is not None and out.tell() != int(announced):
        raise OSError(
            f"received {out.tell()} of {announced} bytes: the transfer was "
            "truncated"
        )


# Canonical sources and checksums (see shared/data/README.md for provenance).
MULTI30K_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
MULTI30K_SHA256 = {
    "train.de.gz": (
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"
    ),
    "train.en.gz": (
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"
    ),
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"
    ),
    "test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"
    ),
    "test_2017_flickr.de.gz": (
        "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee"
    ),
    "test_2017_flickr.en.gz": (
        "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074"
    ),
    "test_2017_mscoco.de.gz": (
        "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338"
    ),
    "test_2017_mscoco.en.gz": (
        "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58"
    ),
    "test_2018_flickr.de.gz": (
        "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608"
    ),
    "test_2018_flickr.en.gz": (
        "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d"
    ),
}
TINY_SHAKESPEARE_SHA256 = (
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
)

REGISTRY: dict[str, tuple[Resource, ...]] = {
    **{
        f"multi30k/{file.removesuffix('.gz')}": (
            Resource(f"multi30k/{file}", sha, MULTI30K_URL + file),
        )
        for file, sha in MULTI30K_SHA256.items()
    },
    # The mirror's repackaged archive (no unlabelled reviews) first,
    # then the canonical one.
    "imdb": (
        Resource(
            "imdb/aclImdb_v1_labeled.tar.gz",
            "fc132c2a23a4d23eec474b518907765dbc9c59e648c1e57ac8010670238ed697",
        ),
        Resource(
            "imdb/aclImdb_v1.tar.gz",
            "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
            "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        ),
    ),
    "tinyshakespeare": (
        Resource(
            "chars/tinyshakespeare.txt.gz", TINY_SHAKESPEARE_SHA256, content="gzip"
        ),
        Resource(
            "chars/tinyshakespeare.txt",
            TINY_SHAKESPEARE_SHA256,
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        ),
    ),
    "enwik8": (
        Resource(
            "chars/enwik8.zip",
            "2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8",
            "http://mattmahoney.net/dc/enwik8.zip",
            content="zip:enwik8",
        ),
    ),
    # The first 10^6 bytes of enwik8 ("enwik6"): a different, smaller dataset.
    # Scores on it are NOT comparable with published enwik8 results.
    "enwik8_prefix": (
        Resource(
            "chars/enwik8_prefix_1000000.gz",
            "369b688978f649681136198fb96db14c1616756260c55fb4b65e9bc049552cad",
            content="gzip",
        ),
    ),
}

# GPT-2 (124M) as Hugging Face publishes it, at a fixed revision of
# openai-community/gpt2: each file's sha256, in the order of the names.
GPT2_REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"
GPT2_URL = f"https://huggingface.co/openai-community/gpt2/resolve/{GPT2_REVISION}/"
GPT2_SHA256 = zip(
    ("config.json", "model.safetensors", "vocab.json", "merges.txt"),
    (
        "0daed7749b4f02b8f76240d5444551d7b08712dab4d0adb8239c56ba823bb7b4",
        "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707",
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    ),
    strict=True,
)
GPT2_FILES = {f: Resource(f"gpt2/{f}", sha, GPT2_URL + f) for f, sha in GPT2_SHA256}


def gpt2_folder(online: bool = False) -> Path | None:
    """The folder holding GPT-2's published files, each verified by sha256.

    The folder is ``settings.gpt2_dir()`` (``AT_GPT2_DIR``, default
    ``~/.cache/annotated_transformer/gpt2``). A missing file is downloaded into it
    when ``online`` (548 MB in all); otherwise a missing file gives None.
    """
    folder = settings.gpt2_dir()
    for file, resource in GPT2_FILES.items():
        path = folder / file
        if path.is_file():
            verify(path, resource)
        elif online:
            download(resource, path)
        else:
            return None
    return folder
