"""A `--data` folder of images, listed as Keras's `image_dataset_from_directory` lists it
(`class_listing` for the labels): each entry `os.stat`-ed with links followed (a FIFO would
block) and its header read, so an image over MAX_IMAGE_PIXELS is refused by name before
anything is decoded, without TensorFlow. Decoding happens in tf.data (`data/sources.py`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from layergrad.core.errors import InputError
from layergrad.core.limits import MAX_IMAGE_PIXELS
from layergrad.files.guards import special_kind

IMAGE_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # what Keras decodes
HEADER_BYTES = 1 << 16  # a JPEG's size may come after its EXIF block; look this far
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


@dataclass(frozen=True)
class ImageFile:
    """One checked image: its path, and its format from its header."""

    path: str
    kind: str  # "png", "jpeg", "gif", "bmp"


def list_images(folder: str, base: str | None = None) -> list[ImageFile]:
    """The images under ``folder`` in Keras's order, each checked (see the module doc); the
    messages name `--data base` (default: ``folder``).

    Raises:
        InputError: an entry that is not a regular file, a header that is not an image of
            its kind, or an image over MAX_IMAGE_PIXELS; the message names the file.
    """
    return [check_image(path, base or folder) for path in image_paths(folder)]


def image_paths(folder: str) -> Iterator[str]:
    """The paths of the images under ``folder``, sub-folders by path and files sorted in each."""
    for root, _, names in sorted(os.walk(folder), key=lambda entry: entry[0]):
        found = (n for n in sorted(names) if n.lower().endswith(IMAGE_FORMATS))
        yield from (os.path.join(root, n) for n in found)


@dataclass(frozen=True)
class ClassListing:
    """A folder's images with their classes, as Keras infers them: `images[i]` is of class
    `ids[i]`, named `classes[ids[i]]`; `loose` are the images directly in the folder."""

    images: tuple[ImageFile, ...]
    ids: tuple[int, ...]
    classes: tuple[str, ...]
    loose: tuple[str, ...]


def class_listing(folder: str) -> ClassListing:
    """The images under ``folder`` with the class of each, as
    `keras.utils.image_dataset_from_directory(labels="inferred")` infers it: each immediate
    sub-folder whose name does not start with "." is a class, numbered in sorted name order;
    a class holds the images at any depth below its sub-folder, listed class by class as
    Keras lists them (sub-folders by path, files sorted). Images directly in ``folder`` are
    of no class (Keras skips them). Each image is checked as `list_images` checks it.
    """
    is_folder = {n: os.path.isdir(os.path.join(folder, n)) for n in sorted(os.listdir(folder))}
    classes = tuple(n for n in is_folder if is_folder[n] and not n.startswith("."))
    found, ids = [], []
    for index, name in enumerate(classes):
        held = list_images(os.path.join(folder, name), base=folder)
        found += held
        ids += [index] * len(held)
    loose = tuple(n for n in is_folder if not is_folder[n] and n.lower().endswith(IMAGE_FORMATS))
    return ClassListing(tuple(found), tuple(ids), classes, loose)


def check_image(path: str, folder: str) -> ImageFile:
    """Stat (links followed), then read and check the header of one image."""
    where = f"--data {folder}: image {path}"
    try:
        kind = special_kind(os.stat(path).st_mode)
        if kind is not None or not os.path.isfile(path):
            raise InputError(
                f"{where} is {kind or 'a directory'}, not a regular file (reading it would "
                "block or never end); remove it from the folder"
            )
        with open(path, "rb") as fh:
            kind_, width, height = image_size(fh)
    except ValueError as exc:
        raise InputError(f"{where} is not a readable image ({exc}); remove or re-save it") from None
    except OSError as exc:
        raise InputError(f"{where} cannot be read ({exc.strerror or exc})") from None
    if width < 1 or height < 1:
        raise InputError(f"{where} declares {width} x {height} pixels; re-save it")
    if width * height > MAX_IMAGE_PIXELS:
        raise InputError(
            f"{where} declares {width:,} x {height:,} pixels, more than the "
            f"{MAX_IMAGE_PIXELS:,} layergrad decodes (decoded it would take "
            f"{width * height * 4 / 2**30:.1f} GB); resize it first"
        )
    return ImageFile(path, kind_)


def image_size(fh: IO[bytes]) -> tuple[str, int, int]:
    """(format, width, height) from the first bytes of a PNG, JPEG, GIF or BMP file.

    Raises:
        ValueError: not one of them, or a header cut short.
    """
    head = fh.read(32)
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(head) < 24 or head[12:16] != b"IHDR":
            raise ValueError("a PNG without its IHDR header")
        return ("png", *struct.unpack(">II", head[16:24]))
    if head[:6] in (b"GIF87a", b"GIF89a"):
        if len(head) < 10:
            raise ValueError("a GIF cut short")
        return ("gif", *struct.unpack("<HH", head[6:10]))
    if head.startswith(b"BM"):
        if len(head) < 26:
            raise ValueError("a BMP cut short")
        (dib,) = struct.unpack_from("<I", head, 14)
        width, height = struct.unpack_from("<HH" if dib == 12 else "<ii", head, 18)  # OS/2: 16 bits
        return "bmp", abs(width), abs(height)
    if head.startswith(b"\xff\xd8"):
        return ("jpeg", *_jpeg_size(fh))
    raise ValueError(f"starts with {head[:8]!r}, not PNG, JPEG, GIF or BMP")


def _jpeg_size(fh: IO[bytes]) -> tuple[int, int]:
    """Width and height from a JPEG's start-of-frame segment, walking the segments."""
    fh.seek(2)
    while fh.tell() < HEADER_BYTES:
        marker = fh.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            break
        code = marker[1]
        if code == 0xFF:  # fill byte
            fh.seek(-1, os.SEEK_CUR)
            continue
        if code in (0xD8, 0x01) or 0xD0 <= code <= 0xD7:  # markers without a length
            continue
        size = fh.read(2)
        if len(size) < 2:
            break
        (length,) = struct.unpack(">H", size)
        if code in _SOF:
            frame = fh.read(5)
            if len(frame) < 5:
                break
            height, width = struct.unpack(">HH", frame[1:5])
            return width, height
        if length < 2:
            break
        fh.seek(length - 2, os.SEEK_CUR)
    raise ValueError(f"a JPEG without a frame header in its first {HEADER_BYTES // 1024} KB")
