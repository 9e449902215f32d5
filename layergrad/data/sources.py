"""Resolve `--data PATH` into batches in the model's input order, read as they are used.

PATH is a `.npy` or `.npz` (`array_records.py`), a folder of images (here) or a data function
(`functions.py`). Nothing is kept, so memory does not grow with the samples. Under a shard each
worker reads its own part (`shards.py`): files by rows, image folders by file, a function
through its `InputContext`, anything else round robin by batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from layergrad.core.errors import InputError, describe
from layergrad.core.limits import IMAGE_DECODERS
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Dataset, Tensor
from layergrad.data import images
from layergrad.data.array_records import array_batches
from layergrad.data.functions import Failure, function_source
from layergrad.data.preflight import source_kind
from layergrad.data.probe_input import ProbeBatch
from layergrad.data.shards import (
    Part,
    Reading,
    Shard,
    part_rows,
    round_robin,
    with_sample_indices,
)
from layergrad.data.user_code import is_function
from layergrad.data.value_checks import InputSpec, check_fits, same_rows, tf_dtype


class DataStream:
    """The batches of one `--data` source.

    `dataset` yields tuples of tensors in the model's input order, `batch_size` rows each
    (the last may be shorter), prefetched: this worker's part when the source is sharded
    (`whole` is then every batch, read again for a diagnosis). `samples` is how many rows to
    expect (None when the source does not say). A stream opened with its labels
    (`data/label_stream.py`) has each batch's labels after its inputs, one tensor per key of
    `labels` (`y`, or `y:NAME` per output), from the same rows.
    """

    probe = False  # the probe batch, a source of one batch (`ProbeStream`)

    def __init__(
        self,
        source: str,
        specs: Sequence[InputSpec],
        dataset: Dataset,
        samples: int | None,
        failure: Failure,
        checked: bool = False,
        batch_size: int = 1,
        part: Part | None = None,
        first_sample: int = 0,
        labels: Sequence[str] = (),
    ) -> None:
        self.source, self.specs, self.whole = source, tuple(specs), dataset
        self.labels = tuple(labels)
        self._failure, self.checked = failure, checked
        self.batch_size, self.part, self.first_sample = batch_size, part, first_sample
        # names what made batch N unreadable (the image that does not decode), if it can
        self.explain: Callable[[int], str | None] | None = None
        self.dataset = dataset if part is None else part.dataset
        self.samples = samples if part is None else part.samples

    def batch_index(self, local: int) -> int:
        """The index among every batch of the data of this process's batch `local`."""
        if self.part is None:
            return local
        return self.part.first_batch + local * self.part.stride

    def indexed(self) -> Dataset:
        """The batches this process runs, each followed by its samples' indices in the data
        (int64, counted from `first_sample` over the whole source)."""
        if self.part is not None and self.part.indexed is not None:
            if not self.first_sample:
                return self.part.indexed
            return self.part.indexed.map(lambda *b: (*b[:-1], b[-1] + self.first_sample))
        offset = 0 if self.part is None else self.part.offset
        return with_sample_indices(self.dataset, self.first_sample + offset)

    def check_batch(self, index: int, parts: Sequence[Sequence[Tensor]]) -> int:
        """Check batch `index` (per input, its pieces on each replica); return its rows.

        A source whose shapes were checked already (a file, an image folder) is only
        counted."""
        rows = [sum(int(p.shape[0]) for p in pieces) for pieces in parts]
        if self.checked:
            return rows[0] if rows else 0
        where = f"--data {self.source}: batch {index}"
        for spec, pieces, n in zip(self.specs, parts, rows, strict=True):
            for piece in pieces:
                check_fits((n, *piece.shape[1:]), piece.dtype.as_numpy_dtype, spec, where)
        return same_rows(where, [s.name for s in self.specs], rows)

    def raise_failure(self, batch: int | None = None) -> None:
        """Raise the error that stopped a Python reader, if one did; with ``batch``, also the
        one `explain` finds for that batch (the image that does not decode)."""
        if self._failure.error is not None:
            raise self._failure.error
        if batch is not None and self.explain is not None:
            found = self.explain(self.batch_index(batch))
            if found:
                raise InputError(found)

    def batch(self, index: int) -> ProbeBatch:
        """Batch `index` again, as arrays (the source is read again up to it), with its
        labels when the stream has them."""
        n = len(self.specs)
        for i, tensors in enumerate(self.whole):
            if i == index:
                arrays = tuple(np.asarray(t.numpy()) for t in tensors)
                labels = dict(zip(self.labels, arrays[n:], strict=True)) or None
                names = tuple(s.name for s in self.specs)
                return ProbeBatch(arrays[:n], names, self.source, None, labels=labels)
        self.raise_failure()
        raise InputError(f"--data {self.source} has no batch {index}")


class ProbeStream(DataStream):
    """The probe batch (arrays in the model's input order, then its labels in output order)
    as a data source of one batch, which the loop over batches runs eagerly, without a
    `tf.data` pipeline."""

    probe = True

    def __init__(self, arrays: Sequence[np.ndarray], labels: Sequence[np.ndarray] = ()) -> None:
        rows = int(arrays[0].shape[0]) if arrays and arrays[0].ndim else 1
        specs = [InputSpec(f"input_{i}", a.shape[1:], str(a.dtype)) for i, a in enumerate(arrays)]
        batch = tuple(tf.convert_to_tensor(a) for a in (*arrays, *labels))
        keys = [f"y:{i}" for i in range(len(labels))]
        super().__init__(
            "the probe batch", specs, [batch], rows, Failure(), True, rows, labels=keys
        )

    def indexed(self) -> Dataset:
        return [(*self.whole[0], tf.range(self.samples or 0, dtype=tf.int64))]


def open_data(
    path: str | os.PathLike[str],
    specs: Sequence[InputSpec],
    batch_size: int,
    limit: int | None = None,
    shard: Shard | None = None,
    replicas: int = 1,
    first_sample: int = 0,
) -> DataStream:
    """Open `--data PATH` for a model with inputs `specs` (`probe_input.input_specs`), in
    batches of `batch_size` rows, at most `limit` samples; with `shard` (this worker,
    workers) this worker's part only, `replicas` in sync over every worker (a function's
    InputContext says so); `first_sample` numbers the data's samples in a larger data set.

    Raises:
        InputError: the source is missing, of an unknown kind, or does not fit the inputs.

    Example (not run)::

        stream = open_data("x.npy", input_specs(model), batch_size=32)
        stream.samples  # 20000
    """
    how = Opening(os.fspath(path), tuple(specs), batch_size, limit, shard, replicas, first_sample)
    kind, failure = source_kind(how.text), Failure()
    if kind == "images":
        found = images.list_images(how.text)  # every entry checked, every size within budget
        return how.stream(*image_batches(how, found), failure, found=found)
    if kind == "function":
        dataset, rows, part, _ = function_source(how, failure)
        return how.stream(dataset, rows, part, failure)
    return how.stream(*array_batches(how, failure), failure)


class Opening(Reading):
    """What `--data` is opened with (see `open_data`), and the stream it makes."""

    def stream(
        self,
        dataset: Dataset,
        rows: int | None,
        part: Part | None,
        failure: Failure,
        labels: Sequence[str] = (),
        found: Sequence[images.ImageFile] | None = None,
    ) -> DataStream:
        """The `DataStream` of the source's batches: prefetched, shared round robin under a
        shard when the source has no parts of its own; with `found` (an image folder's images,
        in the order read) a batch that fails to decode names its image."""
        limit, batch_size = self.limit, self.batch_size
        samples = limit if rows is None else rows if limit is None else min(rows, limit)
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
        if self.shard is not None and part is None:
            part = round_robin(dataset, self.shard)
        stream = DataStream(
            self.text, self.specs, dataset, samples, failure, not is_function(self.text),
            batch_size, part, self.first_sample, labels,
        )  # fmt: skip
        if found is not None:  # a batch that fails to decode: name its image
            channels = int(self.specs[0].shape[2] or 0)
            stream.explain = locate_failure(self.text, list(found), channels, batch_size)
        return stream


def image_batches(
    how: Reading,
    found: Sequence[images.ImageFile],
    column: Callable[[int, int], Dataset] | None = None,
) -> tuple[Dataset, int, Part | None]:
    """The images `found`, decoded and resized as Keras's `image_dataset_from_directory` does
    (pixels 0-255), each entry checked first (`data/images`); with `column`, each image
    followed by its label (`column(start, stop)`: the labels of images start to stop)."""
    path, specs, batch_size, limit = how.text, how.specs, how.batch_size, how.limit
    spec = specs[0] if len(specs) == 1 else None
    shape = spec.shape if spec is not None else ()
    if spec is None or len(shape) != 3 or None in shape[:2] or shape[2] not in (1, 3, 4):
        got = ", ".join(f"{s.name} {s.shape}" for s in specs)
        raise InputError(
            f"--data {path} is a folder of images, which needs a model with one image input "
            f"(height, width, 1, 3 or 4 channels); this model's inputs are {got}; pass the "
            "images as a .npy or through FILE.py:function instead"
        )
    if not found:
        raise InputError(
            f"--data {path} is a folder with no images: no {', '.join(images.IMAGE_FORMATS)} "
            "files in it or its sub-folders; pass a folder of images, or a .npy / .npz file"
        )
    found = list(found if limit is None else found[:limit])
    size, channels = (int(shape[0] or 0), int(shape[1] or 0)), int(shape[2] or 0)

    def read(start: int, stop: int) -> Dataset:
        pictures = image_dataset(found[start:stop], size, channels, tf_dtype(spec.dtype))
        if column is not None:
            both = tf.data.Dataset.zip((pictures, column(start, stop)))
            pictures = both.map(lambda picture, y: (*picture, y))
        return pictures.batch(batch_size)

    part = None
    if how.shard is not None:  # by file: this worker decodes its own images only
        start, stop = part_rows(len(found), batch_size, how.shard)
        part = Part(
            read(start, stop).prefetch(tf.data.AUTOTUNE), stop - start, offset=start,
            first_batch=start // batch_size,
        )  # fmt: skip
    return read(0, len(found)), len(found), part


def image_dataset(
    found: list[images.ImageFile], size: tuple[int, int], channels: int, dtype: str
) -> Dataset:
    """A tf.data.Dataset of one image per element, decoded (IMAGE_DECODERS at a time), resized
    as Keras does (bilinear, pixels 0-255) and cast to ``dtype``. A BMP is decoded with its own
    channels and converted: TensorFlow decodes no BMP straight to one channel."""
    paths = tf.constant([i.path for i in found])
    bmp = tf.constant([i.kind == "bmp" for i in found])

    def load(path: Tensor, is_bmp: Tensor) -> tuple[Tensor]:
        image = tf.image.resize(_decoded(path, is_bmp, channels), size, method="bilinear")
        image.set_shape((*size, channels))
        return (tf.cast(image, dtype),)

    dataset = tf.data.Dataset.from_tensor_slices((paths, bmp))
    return dataset.map(load, num_parallel_calls=IMAGE_DECODERS, deterministic=True)


def _decoded(path: Tensor, is_bmp: Tensor, channels: int) -> Tensor:
    """The image at `path`, decoded with `channels` channels."""
    data = tf.io.read_file(path)
    return tf.cond(
        is_bmp,
        lambda: _bmp_channels(tf.io.decode_bmp(data, channels=0), channels),
        lambda: tf.io.decode_image(data, channels=channels, expand_animations=False),
    )


def _bmp_channels(image: Tensor, channels: int) -> Tensor:
    """A decoded BMP (1, 3 or 4 channels) with ``channels`` channels."""
    have = tf.shape(image)[-1]
    rgb = tf.cond(
        have == 1,
        lambda: tf.image.grayscale_to_rgb(image[..., :1]),
        lambda: image[..., :3],
    )
    if channels == 1:
        return tf.cond(
            have == 1, lambda: image[..., :1], lambda: tf.cast(
                tf.round(tf.image.rgb_to_grayscale(tf.cast(rgb, tf.float32))), tf.uint8)
        )  # fmt: skip
    if channels == 3:
        return rgb
    alpha = tf.cond(
        have == 4, lambda: image[..., 3:4], lambda: tf.fill(tf.shape(image[..., :1]), tf.uint8.max)
    )
    return tf.concat([rgb, alpha], axis=-1)


def locate_failure(
    folder: str, found: list[images.ImageFile], channels: int, batch_size: int
) -> Callable[[int], str | None]:
    """A function naming the image that failed in batch b (its images decoded one by one)."""

    def find(b: int) -> str | None:
        for image in found[b * batch_size : (b + 1) * batch_size]:
            try:
                _decoded(tf.constant(image.path), tf.constant(image.kind == "bmp"), channels)
            except Exception as exc:
                return f"--data {folder}: image {image.path} cannot be decoded ({describe(exc)})"
        return None

    return find
