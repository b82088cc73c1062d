"""TransferQueue: py_wire frames as TransferQueue rows.

TransferQueue (TQ, PyPI ``transferqueue``) keeps what it is good at: keys, tags, partitions,
samplers, consumption tracking and capacity. py_wire keeps what TQ cannot: ragged media with
their image boundaries, per-row shapes and lengths, media shared inside a GRPO group, dtypes
checked at the producer. :func:`put` stores a batch as frames, :func:`get` returns the decoded
views of the rows asked for (:func:`get_frames` the frames themselves).

**Granularity: one TQ key per GRPO group, or one per sample.** A group is ``group_size`` rows
of the batch, the ``n`` generations of one prompt, and its rows share their prompt's images:
inside one frame they are one segment, stored and moved once (the Qwen2.5-VL batch of
``benchmarks/data_plane.py``: 73 MB instead of 291 MB); per-row frames would store every image
``n`` times. Keyed per group (``len(keys)`` = groups), a TQ row holds a group's frames and
TQ's samplers pick groups. Keyed per sample (``len(keys)`` = rows, as NeMo-RL keys its rows),
each key's text column holds its sample's row alone, and the group's media frame is stored
once, under the group's first key, which every key of the group names in its tags
(``MEDIA_HOLDER``, ``MEDIA_ROW``); a fetch of any samples reads each of their groups' media
frames once. Tags are otherwise the caller's, plus ``total_lengths`` and py_wire's own
(``GROUP``, ``STORED``, ``WRITE_BACKS``).

**A key's data is only its own.** Every group gets a random identity at :func:`put`, in the
``__metadata__`` of its text, media and write-back frames (``GROUP_KEY``) and in its keys'
tags (``GROUP``), compared on every fetch: a sample reads its own group's media or a
:class:`~py_wire.FrameError` (a media key put again by another group, tags copied from
another group's sample), and a put over a group's first key that its other live samples read
is refused. A fetch of many keys returns each key's latest values, as a fetch of that key
alone does, write-backs that only some of them hold included (``write_back`` lists each key's
write-back columns in its tags, ``WRITE_BACKS``: TQ's metadata of many keys names only the
columns all hold).

**The schema is named, not repeated.** A frame embeds its schema's text (4.4 KB for
``nemo_rl/qwen2_5_vl``); one per group is fine, one per sample or per write-back is most of its
bytes. So write-back frames and per-sample text rows are compact (they name the schema by
fingerprint) and each group's text frame under its first key embeds it; every key is tagged
with the fingerprint (``SCHEMA``) and that key (``SCHEMA_HOLDER``). A process that does not
hold the schema (a worker that never loaded it) reads it once from there before fetching
compact frames; when that key is gone (clear a group's keys together) the fetch is a
:class:`~py_wire.FrameError` naming the key and the fingerprint.

**Stages are columns.** Every group is two TQ columns, each holding one frame per row:
``py_wire.text`` and ``py_wire.media``. Which column a field travels in is declared in the
schema file (``column = "media"`` on images, their grids and masks; ``"text"``, the default,
for everything else; see docs/schemas.md); the sequence field travels in both, so that each
column's frame is checkable on its own (:func:`py_wire.check_contracts`) and :func:`get` can
check that the columns of one key are one group's (same schema, rows and tokens) before merging
them. ``get(..., stage=s)`` or ``get(..., fields=[...])`` fetches the media column only when a
wanted field is declared media: a text-only stage (``generation`` of ``qwen2_5_vl``) moves no
media byte. Whatever columns it reads, a fetch returns exactly what :func:`py_wire.decode`
returns of the whole batch for that stage. Shapes, lengths and segment boundaries live inside
the frames.

**Write-backs.** The fields later stages add (``prev_logprobs``, ``reference_policy_logprobs``,
``advantages``) are not stored at put (``put(..., stage="logprob")`` accepts a rollout batch
without them) but added per key by :func:`write_back`, each write-back one more TQ column
(``py_wire.fields:<names>``) checked against the stored groups (schema, rows, each row's
tokens, as :func:`put` recorded them in the keys' tags, ``STORED``: no fetch) before TQ sees a
byte; :func:`get` merges stored and written-back fields, each write-back's rows compared with
its key's text frame.

**Samplers.** :func:`put` tags each group with ``total_lengths`` (its tokens), what TQ's
``SeqlenBalancedSampler`` reads; :func:`get_by_meta` decodes the samples of the ``BatchMeta``
a sampler or ``get_meta`` hands out, and :func:`decode_columns` the frames of columns already
fetched.

**The producer checks everything.** :func:`put` validates the whole batch as :func:`py_wire.encode`
does (names, required fields, dtypes, shapes, placeholder contracts) before anything reaches
TQ: a ``reward`` that drifted from float32 to bfloat16 raises :class:`~py_wire.BatchError`
(TQ alone logs "dtype mismatch" and promotes on get).

**Why above ``kv_batch_put`` / ``kv_batch_get`` rather than a registered storage manager.**
TQ's ``StorageManager`` interface is ``put_data(TensorDict)`` / ``get_data() -> TensorDict``
and the client wraps every get in a ``TensorDict`` whatever the manager does, so a registered
manager (``StorageManagerFactory``) or KV client (``StorageClientFactory``) cannot remove the
TensorDict boundary; it would only replace SimpleStorage's storage units with new actors of
its own. What TQ's conversions cost is the per-field nested rebuild of *many* ragged tensors;
a frame column is one jagged ``uint8`` tensor per column whose rows TQ's serializer moves as
buffers with no copy on put (the groups are encoded straight into one buffer, each at a
64-byte aligned slot) and concatenates once on get (one memcpy of the stored bytes, which
:func:`get` then decodes as views, 64-byte alignment kept). The rest of the time is TQ's own
byte moves through its storage units, which a manager of ours would pay too.

**Two storage paths, chosen from the TQ client's backend.** On SimpleStorage (TQ's default)
a column is one jagged ``uint8`` tensor, as above: its bytes go through TQ's storage units
(ZMQ sockets, about four copies of every stored byte on put and get together). On TQ's
``RayStore`` backend (``backend.storage_backend: RayStore``) each group's frame is one
:class:`~py_wire.Frame` value that TQ's ``RayStorageClient`` stores with ``ray.put``: the frame
goes into Ray's object store once, and :func:`get` decodes it in place (a read-only object
store page is mapped copy-on-write, so views are writable and a write stays private; see
:meth:`py_wire.Frame.copy_on_write`). TQ's own tensor path on RayStore needs NIXL
(``ray.put(..., _tensor_transport="nixl")``); frames, stored as objects, do not. As with any
``ray.put``, the producer process owns the objects: they live while it does (TQ's design for
RayStore, not py_wire's), and :func:`clear` (TQ's ``kv_clear``) frees them.

Nothing here starts Ray or TQ: call ``ray.init(num_cpus=4)`` (TQ's controller and each of its
storage units take one CPU; fewer makes ``transfer_queue.init()`` hang) and
``transfer_queue.init()`` first.
"""

from py_wire.interop.transfer_queue.columns import (
    COLUMN_KEY,
    COLUMNS,
    GROUP,
    GROUP_KEY,
    MEDIA,
    MEDIA_HOLDER,
    MEDIA_ROW,
    SCHEMA,
    SCHEMA_HOLDER,
    STORED,
    TEXT,
    TOTAL_LENGTHS,
    WRITE_BACK,
    WRITE_BACKS,
    columns_for,
    frames_column,
    media_fields,
    stored_frames,
    stores_frames_as_objects,
)
from py_wire.interop.transfer_queue.get import (
    decode_columns,
    get,
    get_by_meta,
    get_frames,
    get_samples,
)
from py_wire.interop.transfer_queue.meta import meta_keys
from py_wire.interop.transfer_queue.put import encode_group_frames, encode_groups, put
from py_wire.interop.transfer_queue.write_back import write_back

__all__ = [
    "COLUMNS",
    "COLUMN_KEY",
    "GROUP",
    "GROUP_KEY",
    "MEDIA",
    "MEDIA_HOLDER",
    "MEDIA_ROW",
    "SCHEMA",
    "SCHEMA_HOLDER",
    "STORED",
    "TEXT",
    "TOTAL_LENGTHS",
    "WRITE_BACK",
    "WRITE_BACKS",
    "columns_for",
    "decode_columns",
    "encode_group_frames",
    "encode_groups",
    "frames_column",
    "get",
    "get_by_meta",
    "get_frames",
    "get_samples",
    "media_fields",
    "meta_keys",
    "put",
    "stored_frames",
    "stores_frames_as_objects",
    "write_back",
]
