"""Fetching dataset files: md5 checks and archives downloaded whole, checked, then unpacked
(CIFAR's .tar.gz, EMNIST's .zip). A download goes to a temporary file first, so a concurrent rank
never reads half an archive.

    >>> md5_ok("/no/such/file", "0" * 32)
    False
"""
import hashlib
import os
import sys
import tarfile
import tempfile
import zipfile

DOWNLOAD_TIMEOUT_S = 60


def md5_ok(path, md5):
    """True if ``path`` is a file whose md5 is ``md5`` (read in 1 MB chunks)."""
    if not os.path.isfile(path):
        return False
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() == md5


def download_and_extract(url, root, md5):
    """Fetch the archive at ``url`` (.tar.gz or .zip) into a temporary file, check ``md5``, unpack
    it into ``root``; RuntimeError naming the URL if it cannot be fetched or is damaged."""
    # imported here: http/ssl cost time at import and only downloads need them
    from urllib.request import urlopen
    os.makedirs(root, exist_ok=True)
    print(f"jtmini: downloading {url}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        path = os.path.join(tmp, os.path.basename(url))
        try:
            with open(path, "wb") as out, urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
        except OSError as err:
            raise RuntimeError(f"could not download {url} ({err}); put the unpacked archive "
                               f"into {root} and use download=False") from None
        if not md5_ok(path, md5):
            raise RuntimeError(f"{url} arrived damaged (md5 is not {md5})")
        if path.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:      # member names are kept inside root
                archive.extractall(root)
        else:
            with tarfile.open(path, "r:gz") as archive:
                archive.extractall(root, filter="data")
