"""Small real media files for the content-block tests: PNG, GIF, WebP and JPEG headers
of a chosen size, and a PDF with a chosen number of pages."""

from __future__ import annotations

import base64
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int) -> bytes:
    """A complete, decodable grey PNG."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows))
        + _chunk(b"IEND", b"")
    )


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def webp(width: int, height: int) -> bytes:
    """An extended-format (VP8X) WebP header."""
    vp8x = (
        b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )
    body = b"WEBP" + b"VP8X" + struct.pack("<I", len(vp8x)) + vp8x
    return b"RIFF" + struct.pack("<I", len(body)) + body


def jpeg(width: int, height: int) -> bytes:
    """SOI, a JFIF APP0 segment, a baseline start-of-frame with the size, EOI."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def pdf(pages: int) -> bytes:
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages)).encode()
    objects.append(b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages)
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    body = b"".join(b"%d 0 obj\n" % (i + 1) + obj + b"\nendobj\n" for i, obj in enumerate(objects))
    return b"%PDF-1.4\n" + body + b"trailer << /Root 1 0 R >>\n%%EOF\n"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def image_block(raw: bytes, media_type: str = "image/png") -> dict:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": b64(raw)},
    }


def pdf_block(pages: int, title: str | None = None) -> dict:
    block = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(pdf(pages))},
    }
    if title:
        block["title"] = title
    return block


def thinking_block(text: str, signature: str = "sig-1") -> dict:
    return {"type": "thinking", "thinking": text, "signature": signature}
