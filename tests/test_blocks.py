"""Content blocks: validation codes, sizes read from real headers, each provider's token
rules, and the placeholders of compacted images and documents."""

import pytest
from django.core.exceptions import ValidationError

from assistant.providers.anthropic.wire import ANTHROPIC, anthropic_image_tokens
from assistant.providers.gemini.wire import GEMINI, gemini_image_tokens
from assistant.providers.openai.wire import OPENAI, openai_image_tokens
from assistant.text import blocks
from tests.media import b64, gif, image_block, jpeg, pdf, pdf_block, png, thinking_block, webp

MAX = 5 * 1024 * 1024
NOT_BASE64 = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "@@"},
}
FILE_URL = {"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}
PNG_AS_PDF = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": b64(png(2, 2))},
}


def code_of(role: str, value) -> str:
    with pytest.raises(ValidationError) as caught:
        blocks.validate_blocks(role, value, MAX)
    return caught.value.code


@pytest.mark.parametrize(
    ("maker", "media_type"),
    [(png, "image/png"), (gif, "image/gif"), (webp, "image/webp"), (jpeg, "image/jpeg")],
)
def test_image_size_comes_from_the_header(maker, media_type) -> None:
    raw = maker(1024, 768)
    assert blocks.sniff_media_type(raw) == media_type
    assert blocks.image_size(raw) == (1024, 768)
    assert blocks.validate_blocks("user", [image_block(raw, media_type)], MAX) == [
        image_block(raw, media_type)
    ]


def test_valid_blocks_are_copied_with_the_keys_providers_take() -> None:
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    text_doc = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "Terms."},
        "title": "terms.txt",
    }
    assert blocks.validate_blocks("tool", [url_image, text_doc, pdf_block(2)], MAX) == [
        url_image,
        text_doc,
        pdf_block(2),
    ]
    thinking = [thinking_block("Let me check."), {"type": "redacted_thinking", "data": "EmwK"}]
    assert blocks.validate_blocks("assistant", thinking, MAX) == thinking
    assert blocks.validate_blocks("user", [], MAX) is None


@pytest.mark.parametrize(
    ("role", "value", "code"),
    [
        ("user", "not a list", "invalid_blocks"),
        ("user", [{"type": "video", "source": {}}], "unknown_block_type"),
        ("user", [{"type": "text", "text": "hi"}], "unknown_block_type"),
        ("user", [thinking_block("x")], "block_not_allowed"),
        ("assistant", [image_block(png(2, 2))], "block_not_allowed"),
        ("system", [image_block(png(2, 2))], "block_not_allowed"),
        ("assistant", [{"type": "thinking", "thinking": "x"}], "invalid_blocks"),
        ("assistant", [{"type": "thinking", "thinking": "x", "signature": ""}], "invalid_blocks"),
        ("user", [{**image_block(png(2, 2)), "cache_control": {}}], "invalid_blocks"),
        ("user", [{"type": "image", "source": {"type": "file", "id": "f"}}], "invalid_source"),
        ("user", [image_block(png(2, 2), "image/bmp")], "unsupported_media_type"),
        ("user", [image_block(png(2, 2), "image/jpeg")], "media_type_mismatch"),
        ("user", [image_block(b"hello world", "image/png")], "media_type_mismatch"),
        ("user", [image_block(png(2, 2)[:20])], "invalid_image"),
        ("user", [NOT_BASE64], "invalid_base64"),
        ("user", [FILE_URL], "invalid_url"),
        ("user", [pdf_block(1) | {"title": ""}], "invalid_blocks"),
        ("user", [PNG_AS_PDF], "media_type_mismatch"),
        ("user", [image_block(png(2, 2))] * 101, "too_many_blocks"),
    ],
)  # fmt: skip
def test_bad_blocks_are_refused_with_a_code(role, value, code) -> None:
    assert code_of(role, value) == code


def test_oversized_data_is_refused() -> None:
    raw = png(2, 2) + b"\x00" * 2000
    with pytest.raises(ValidationError) as caught:
        blocks.validate_blocks("user", [image_block(raw)], 1000)
    assert caught.value.code == "block_too_large"
    # each under the cap, together over it
    with pytest.raises(ValidationError) as caught:
        blocks.validate_blocks("user", [image_block(png(2, 2) + b"\x00" * 600)] * 2, 1000)
    assert caught.value.code == "block_too_large"


def test_anthropic_image_tokens_follow_the_published_rule() -> None:
    # width * height / 750, after scaling to 1568 px on the long edge and ~1.15 megapixels
    assert anthropic_image_tokens(200, 200) == 54
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(1092, 1092) == 1534
    assert anthropic_image_tokens(4000, 3000) == 1534  # scaled down first


def test_gemini_image_tokens_follow_the_published_rule() -> None:
    assert gemini_image_tokens(384, 384) == 258
    assert gemini_image_tokens(385, 100) == 258  # one tile
    assert gemini_image_tokens(1000, 1000) == 4 * 258
    assert gemini_image_tokens(1920, 1080) == 6 * 258


def test_openai_image_tokens_follow_the_published_rule() -> None:
    # fit 2048 x 2048, short side to 768, then 85 + 170 per 512 px tile
    assert openai_image_tokens(1024, 1024) == 765
    assert openai_image_tokens(2048, 4096) == 1105
    assert openai_image_tokens(300, 200) == 255


def test_document_tokens_per_page_and_unknown_sources() -> None:
    assert blocks.pdf_pages(pdf(3)) == 3
    assert blocks.block_tokens(pdf_block(3), ANTHROPIC.media) == 9000
    assert blocks.block_tokens(pdf_block(3), GEMINI.media) == 3 * 258
    url_doc = {"type": "document", "source": {"type": "url", "url": "https://example.com/r.pdf"}}
    assert blocks.block_tokens(url_doc, GEMINI.media) == 10 * 258
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    assert blocks.block_tokens(url_image, ANTHROPIC.media) == 1534
    assert blocks.block_tokens(image_block(png(1000, 1000)), GEMINI.media) == 1032
    assert blocks.block_tokens(image_block(png(1000, 1000)), OPENAI.media) == 765


def test_compacted_blocks_name_each_image_and_document_and_drop_thinking() -> None:
    raw = png(640, 480)
    kept = blocks.compacted_blocks(
        [thinking_block("secret plan"), image_block(raw), pdf_block(2, title="Q3 report")]
    )
    assert [block["type"] for block in kept] == ["text", "text"]
    assert kept[0]["text"].startswith("[image image/png 640x480 sha256:")
    assert kept[1]["text"].startswith("[document 'Q3 report' application/pdf 2 pages sha256:")
    assert all("the original is stored]" in block["text"] for block in kept)
    assert "secret plan" not in str(kept)


def test_current_turn_starts_at_the_last_user_message() -> None:
    messages = [
        {"role": "user"},
        {"role": "assistant"},
        {"role": "tool"},
        {"role": "user"},
        {"role": "assistant"},
        {"role": "tool"},
    ]
    assert blocks.current_turn_start(messages) == 3
