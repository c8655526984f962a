#!/bin/sh
# The README's demo: Python in the jail calling a host tool.  The tool
# `weather` is a host command (it gets {"args":[...],"kwargs":{...}} as
# JSON on stdin and prints a JSON result); the sandboxed code calls it
# like a Python function, then the C agent host (examples/agent.c) runs
# its turns through libnsbox.  Run after `make`, from anywhere.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
B=${NSBOX_BUILD:-$top/build}
tool=$(mktemp /tmp/nsbox-demo-tool.XXXXXX)
trap 'rm -f "$tool"' EXIT
# The host tool: runs on the host, outside the sandbox.
cat > "$tool" <<'TOOL'
#!/usr/bin/python3.11
import json, sys
call = json.load(sys.stdin)
city = (call["args"] or [call["kwargs"].get("city", "?")])[0]
print(json.dumps({"city": city, "forecast": "sunny", "high_c": 21 + len(city) % 7}))
TOOL
chmod 0755 "$tool"

echo "== nsbox python calling the host tool 'weather'"
"$B/nsbox" python --tool "weather=$tool" -c '
import os, socket
w = weather("Lisbon")
print("inside the sandbox: uid", os.getuid(), "host", socket.gethostname())
print("weather(\"Lisbon\") ->", w)
print("it will be %(forecast)s, %(high_c)d C in %(city)s" % w)
'
echo
echo "== the C agent host (examples/agent.c over libnsbox)"
"$B/examples/agent"
