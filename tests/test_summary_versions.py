"""The window summary's versions: every summary written is kept with
its split, model and tokens; staff correct it (the next request carries the
correction), review it, and revert to an earlier one; nothing is lost."""

from __future__ import annotations

import pytest
from django.contrib import messages as django_messages
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from assistant.models import SummaryVersion
from assistant.services import (
    add_message,
    build_context,
    correct_summary,
    mark_deleted,
    regenerate_window_summary,
    revert_summary,
    review_summary,
)
from assistant.summary.versions import compaction_diff, current_version
from tests.scenarios import staff_user, tool_heavy_conversation

pytestmark = pytest.mark.django_db


@pytest.fixture
def summarized(fake_llm, settings):
    fake_llm.use_anthropic(settings)
    # A loaded machine must not push the summary to the offline fallback.
    settings.ASSISTANT_COMPACTION = {"SUMMARY_CHAT_DEADLINE_SECONDS": 300}
    conversation, _ = tool_heavy_conversation()
    assert regenerate_window_summary(conversation)
    return conversation


def test_every_window_summary_is_kept_with_its_split_model_and_tokens(summarized):
    (version,) = SummaryVersion.objects.filter(conversation=summarized)
    context = build_context(summarized)
    assert version.text == context.window_summary
    assert version.through_message_id == context.cutoff_id
    assert version.kind == SummaryVersion.Kind.MODEL
    assert version.model and version.input_tokens > 0 and version.output_tokens > 0
    assert current_version(summarized.pk) == version


def test_a_correction_is_what_the_next_request_carries_and_the_earlier_stays(summarized):
    staff = staff_user()
    model_version = SummaryVersion.objects.get(conversation=summarized)
    corrected = model_version.text + "\n- Staff: the homepage is post 42."
    made = correct_summary(summarized, corrected, acting_user=staff)
    assert (made.kind, made.created_by) == (SummaryVersion.Kind.STAFF_EDIT, staff)
    assert build_context(summarized).window_summary == corrected
    assert "the homepage is post 42" in str(build_context(summarized).to_anthropic()["system"])
    assert current_version(summarized.pk) == made

    review_summary(summarized, model_version.pk, acting_user=staff)
    model_version.refresh_from_db()
    assert model_version.reviewed_by == staff and model_version.reviewed_at is not None

    back = revert_summary(summarized, model_version.pk, acting_user=staff)
    assert back.kind == SummaryVersion.Kind.REVERT and back.source == model_version
    assert build_context(summarized).window_summary == model_version.text
    assert SummaryVersion.objects.filter(conversation=summarized).count() == 3


def test_the_next_shift_builds_on_the_correction(summarized, fake_llm):
    text = SummaryVersion.objects.get(conversation=summarized).text
    corrected = text.replace("## Goal\n", "## Goal\n- STAFF-MARK-77\n", 1)
    assert corrected != text
    correct_summary(summarized, corrected)
    fake_llm.reset()
    add_message(summarized, "user", "One more question about post 7.")
    add_message(summarized, "assistant", "Post 7 is fine.")
    assert regenerate_window_summary(summarized, keep_last=1)
    (request,) = fake_llm.requests
    assert "STAFF-MARK-77" in str(request.body)


@pytest.mark.parametrize(("text", "code"), [("", "empty_summary"), ("   ", "empty_summary")])
def test_an_empty_correction_is_refused(summarized, text, code):
    with pytest.raises(ValidationError) as refused:
        correct_summary(summarized, text)
    assert refused.value.code == code
    assert SummaryVersion.objects.filter(conversation=summarized).count() == 1


def test_a_version_of_another_split_is_not_reverted_to(summarized):
    first = SummaryVersion.objects.get(conversation=summarized)
    add_message(summarized, "user", "And post 8?")
    add_message(summarized, "assistant", "Also fine.")
    assert regenerate_window_summary(summarized, keep_last=1)
    with pytest.raises(ValidationError) as refused:
        revert_summary(summarized, first.pk)
    assert refused.value.code == "other_split"


def test_no_summary_yet_is_a_clear_error(conversation):
    add_message(conversation, "user", "Hello.")
    with pytest.raises(ValidationError) as refused:
        correct_summary(conversation, "## Goal\n- x")
    assert refused.value.code == "no_summary"


def test_the_diff_shows_what_the_compaction_dropped(summarized):
    version = SummaryVersion.objects.get(conversation=summarized)
    diff = "\n".join(compaction_diff(version))
    assert "-[user m" in diff and "Fix post 42" in diff
    assert "+## Goal" in diff


# --- a deleted conversation's summaries are not reviewed; bad text is refused


def test_a_deleted_conversations_version_is_not_marked_reviewed(summarized):
    version = SummaryVersion.objects.get(conversation=summarized)
    staff = staff_user()
    client = Client()
    client.force_login(staff)
    mark_deleted([summarized.pk])

    with pytest.raises(ValidationError) as refused:
        review_summary(summarized, version.pk, acting_user=staff)
    response = client.post(
        reverse("admin:assistant_summary_review", args=[version.pk]), follow=True
    )

    assert refused.value.code == "conversation_deleted"
    assert response.status_code == 200
    version.refresh_from_db()
    assert (version.reviewed_by, version.reviewed_at) == (None, None)


@pytest.mark.parametrize(
    ("text", "code"), [("a\x00b", "nul_byte"), ("a\ud800b", "invalid_unicode")]
)
def test_a_correction_that_cannot_be_stored_is_refused(summarized, text, code):
    with pytest.raises(ValidationError) as refused:
        correct_summary(summarized, text)
    assert refused.value.code == code
    assert SummaryVersion.objects.filter(conversation=summarized).count() == 1


def test_the_admin_correct_form_with_a_nul_says_so_and_stores_nothing(summarized):
    client = Client()
    client.force_login(staff_user())
    url = reverse("admin:assistant_summary_correct", args=[summarized.pk])

    response = client.post(url, {"text": "## Goal\n- a\x00b"}, follow=True)

    assert response.status_code == 200
    said = [str(m) for m in django_messages.get_messages(response.wsgi_request)]
    assert any("NUL" in m for m in said)
    assert SummaryVersion.objects.filter(conversation=summarized).count() == 1
