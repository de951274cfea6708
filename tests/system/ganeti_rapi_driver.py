"""Call methods of Ganeti 3.0.2's own RAPI client (ganeti.rapi.client.GanetiRapiClient) against
a RAPI server, and print what each answered.

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0. Reads
`{"host", "port", "user", "password", "cafile", "calls": [[label, method, args, kwargs], ...]}`
on stdin; an argument "$job" stands for the job id the last job-submitting call answered.
Prints `[{"label", "method", "result"} or {"label", "method", "error", "code"}, ...]`.
"""

import json
import logging
import sys

from ganeti.rapi import client

REQUEST = json.load(sys.stdin)
logging.disable(logging.CRITICAL)  # the client logs every request; the answers are the output
RAPI = client.GanetiRapiClient(
    REQUEST["host"], port=REQUEST["port"], username=REQUEST["user"],
    password=REQUEST["password"],
    curl_config_fn=client.GenericCurlConfig(cafile=REQUEST["cafile"], timeout=60))
last_job = None


def bound(value):
    if value == "$job":
        return last_job
    if isinstance(value, list):
        return [bound(item) for item in value]
    if isinstance(value, dict):
        return {key: bound(item) for key, item in value.items()}
    return value


answers = []
for label, method, args, kwargs in REQUEST["calls"]:
    try:
        result = getattr(RAPI, method)(*bound(args), **bound(kwargs))
    except client.GanetiApiError as err:
        answers.append({"label": label, "method": method, "error": str(err),
                        "code": err.code})
        continue
    if isinstance(result, (int, str)) and str(result).isdigit():
        last_job = result
    answers.append({"label": label, "method": method, "result": result})
json.dump(answers, sys.stdout)
