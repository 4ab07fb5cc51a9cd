"""Files attached in a Slack thread: which to download, and downloading them.

Text files up to ``context.max_file_bytes`` and images up to ``context.max_image_bytes`` are
fetched from ``url_private_download`` with the bot token as a bearer header. The token goes
only to Slack's own file hosts (or the host the Web API is configured at, the emulator), and
no URL of a file ever enters the brief. Slack answers a request it will not serve with a
sign-in page rather than an error; that is recognised and named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from runtime.brief.attempts import Failed, RetryPolicy, attempt
from runtime.brief.model import Download, FileRef
from runtime.config import ContextConfig
from runtime.errors import Permanent, Retryable

if TYPE_CHECKING:  # httpx (~18 MB with its CLI's imports) loads on the first download
    import httpx

MAX_DOWNLOADS = 10
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/javascript"}
)


def file_ref(file: Mapping[str, Any]) -> FileRef:
    return FileRef(
        file_id=str(file.get("id") or "file"),
        name=str(file.get("name") or file.get("title") or file.get("id") or "file"),
        media_type=str(file.get("mimetype") or "application/octet-stream"),
        size=int(file.get("size") or 0),
    )


def may_send_token(url: str, api_url: str) -> bool:
    """Slack's file hosts, or the host the Web API itself is reached at (the emulator)."""
    parts, api = urlsplit(url), urlsplit(api_url)
    if (parts.scheme, parts.netloc) == (api.scheme, api.netloc):
        return True
    host = parts.hostname or ""
    return parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))


class SlackFiles:
    def __init__(self, token: str, api_url: str, settings: ContextConfig) -> None:
        self._token = token
        self.api_url = api_url
        self.settings = settings
        self.policy = RetryPolicy(attempts=settings.fetch_attempts)

    async def fetch(self, file: Mapping[str, Any], already: int) -> Download:
        """``file``'s content if it is worth reading and within bounds (``already`` is how
        many files this brief has downloaded so far); else why not."""
        ref = file_ref(file)
        limit = self._limit(ref)
        if limit is None:
            return Download(ref, None, "not downloaded: neither a text file nor an image")
        if ref.size > limit:
            return Download(ref, None, f"not downloaded: larger than {limit} bytes")
        if already >= MAX_DOWNLOADS:
            return Download(ref, None, f"not downloaded: only {MAX_DOWNLOADS} files are")
        url = str(file.get("url_private_download") or file.get("url_private") or "")
        if not may_send_token(url, self.api_url):
            return Download(ref, None, "not downloaded: not a Slack file address")
        got = await attempt(f"file {ref.name}", lambda: self._get(url, limit), self.policy)
        if isinstance(got, Failed):
            return Download(ref, None, f"not downloaded: {got.reason}")
        return Download(ref, got)

    def _limit(self, ref: FileRef) -> int | None:
        if ref.media_type in IMAGE_TYPES:
            return self.settings.max_image_bytes
        if ref.media_type.startswith("text/") or ref.media_type in _TEXT_TYPES:
            return self.settings.max_file_bytes
        return None

    async def _get(self, url: str, limit: int) -> bytes:
        import httpx

        headers = {"Authorization": f"Bearer {self._token}"}
        timeout = self.settings.request_timeout_s
        try:
            # httpx drops the Authorization header on a redirect to another host.
            async with (
                httpx.AsyncClient(timeout=timeout, follow_redirects=True) as http,
                http.stream("GET", url, headers=headers) as response,
            ):
                _check(response)
                return await _read(response, limit)
        except httpx.TransportError as e:
            raise Retryable(f"Slack file transport error: {type(e).__name__}") from e


def _check(response: httpx.Response) -> None:
    status = response.status_code
    if status == 429 or status >= 500:
        raise Retryable(f"Slack file download HTTP {status}")
    if status != 200:
        raise Permanent(f"Slack file download HTTP {status}")
    if response.headers.get("content-type", "").startswith("text/html"):
        raise Permanent("Slack answered with a sign-in page: the app needs the files:read scope")


async def _read(response: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise Permanent(f"larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
