"""Where gradlog's files go: the floor below the event-file writer, checkpoints and run
directories, which depends on nothing of gradlog's.

A location is a local path or any URL fsspec knows (``s3://``, ``gs://``, ``memory://``,
``file://``...; fsspec and its backends are imported only for URLs, the ``gradlog[remote]``
extra). Credentials and endpoints come from each backend's own configuration (for S3, the AWS
variables such as ``AWS_ENDPOINT_URL``, or fsspec's config).

* :mod:`.locations`: naming places (``join``, ``relative``, ``is_url``...) and what each can do.
* :mod:`.files`: whole files anywhere, one set of functions (``publish`` writes one atomically).
* :mod:`.atomic`: the one place that fsyncs and renames local files.
* :mod:`.streams`: append-only record streams behind one interface: a local file, an
  appendable fsspec file, or segments on an object store.
* :mod:`.spool`: where segments wait for their upload; ``gradlog sync``.
* :mod:`.retries`: retries and errors naming the URL.
"""

from .atomic import atomic_file, fsync_directory, fsync_file
from .files import (
                    download_event_files,
                    exists,
                    has_file,
                    isdir,
                    makedirs,
                    names,
                    publish,
                    read_bytes,
                    remove,
)
from .locations import (
                    UnknownProtocol,
                    appendable,
                    filesystem,
                    is_url,
                    join,
                    local_path,
                    process_local,
                    relative,
                    same_location,
)
from .retries import RETRY_DELAYS, UploadError, with_retries
from .spool import (
                    NotASpool,
                    cache_path,
                    check_spool,
                    spool_dir,
                    spool_holds_files,
                    unsent,
                    upload_spool,
)
from .streams import SEGMENT_BYTES, AppendableFile, LocalFile, Segments, open_stream

__all__ = ["atomic_file", "fsync_directory", "fsync_file", "download_event_files", "exists",
           "has_file", "isdir", "makedirs", "names", "publish", "read_bytes", "remove",
           "UnknownProtocol", "appendable", "filesystem", "is_url", "join", "local_path",
           "process_local", "relative", "same_location", "RETRY_DELAYS", "UploadError",
           "with_retries", "NotASpool", "cache_path", "check_spool", "spool_dir",
           "spool_holds_files", "unsent", "upload_spool", "SEGMENT_BYTES", "AppendableFile",
           "LocalFile", "Segments", "open_stream"]
