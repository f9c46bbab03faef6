"""Text tasks: exact match, regex, multiple choice; format and length reward parts."""

from .verifiers import (ChoiceVerifier, ExactMatchVerifier, RegexVerifier, answer_tag_format, extract_choice,
                        final_text, format_choices, length_penalty, normalize_text, think_answer_format)

__all__ = ["ChoiceVerifier", "ExactMatchVerifier", "RegexVerifier", "answer_tag_format", "extract_choice",
           "final_text", "format_choices", "length_penalty", "normalize_text", "think_answer_format"]
