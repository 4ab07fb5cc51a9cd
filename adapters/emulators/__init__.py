"""Local emulators of the Slack Web API and the GitHub REST API, for tests and `keel demo`.

- ``server.serve(app)``: run an emulator (or any ASGI app) on a free loopback port.
- ``slack.SlackState`` / ``slack.create_slack_app``: the Slack Web API subset under ``/api/``.
- ``github_state.GitHubState`` / ``github.create_github_app``: the GitHub REST subset.
- ``faults``: the request log and fault injection both emulators share.
- ``webhooks``: signed Slack and GitHub webhook requests and their delivery.
- ``corpus``: real provider payloads by name, from ``corpora/`` (package data; its
  SOURCES.md names their origins); ``contract``: response validation against the providers'
  API descriptions (tests only, with the trimmed descriptions in tests/fixtures; needs
  jsonschema).
"""
