// Drives `nsbox mcp` with the official MCP TypeScript SDK (Client +
// StdioClientTransport) and prints one JSON object of what it saw, for
// tests/integ/test_mcp.py to assert on.
//   node client.mjs NSBOX SCENARIO [SERVER_ARG...]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [nsbox, scenario, ...serverArgs] = process.argv.slice(2);
const out = {};

function text(r) {
	return (r.content || []).map((c) => c.text).join("\n");
}

async function call(client, name, args, opts) {
	const r = await client.callTool({ name, arguments: args }, undefined, opts);
	return { text: text(r), isError: !!r.isError };
}

async function callError(client, name, args) {
	try {
		const r = await client.callTool({ name, arguments: args });
		return { unexpected: r };
	} catch (e) {
		return { code: e.code, message: e.message };
	}
}

async function main() {
	const transport = new StdioClientTransport({ command: nsbox, args: ["mcp", ...serverArgs], stderr: "pipe" });
	let stderr = "";
	transport.stderr?.on("data", (d) => (stderr += d));
	const client = new Client({ name: "nsbox-test", version: "1" });
	const t0 = performance.now();
	await client.connect(transport);
	out.server = client.getServerVersion();
	out.instructions = client.getInstructions();
	out.capabilities = client.getServerCapabilities();

	if (scenario === "basic") {
		out.tools = (await client.listTools()).tools;
		out.run = await call(client, "run_python", { code: "x = 41\nprint('hi')\nx + 1" });
		out.state = await call(client, "run_python", { code: "x * 2" });
		out.exception = await call(client, "run_python", { code: "1/0" });
		out.after_exception = await call(client, "run_python", { code: "x" });
		const ns = await call(client, "new_session", {});
		out.new_session = ns;
		const handle = JSON.parse(ns.text.split("\n")[0]).session;
		out.handle = handle;
		out.s1 = await call(client, "run_python", { session: handle, code: "y = 'own'" });
		out.s2 = await call(client, "run_python", { session: handle, code: "y, 'x' in globals()" });
		out.write = await call(client, "write_file", { session: handle, path: "/tmp/d/a.txt", text: "héllo\n" });
		out.read = await call(client, "read_file", { session: handle, path: "/tmp/d/a.txt" });
		out.write_b64 = await call(client, "write_file", { session: handle, path: "/tmp/d/b.bin", base64: "AP8Q" });
		out.read_b64 = await call(client, "read_file", { session: handle, path: "/tmp/d/b.bin" });
		out.list = await call(client, "list_files", { session: handle, path: "/tmp/d" });
		out.read_missing = await call(client, "read_file", { session: handle, path: "/nonexistent" });
		out.globals_clean = await call(client, "run_python", {
			session: handle,
			code: "sorted(k for k in globals() if 'nsbox_mcp' in k)",
		});
		out.close = await call(client, "close_session", { session: handle });
		out.closed = await call(client, "run_python", { session: handle, code: "1" });
		out.unknown_session = await call(client, "run_python", { session: "0".repeat(32), code: "1" });
		out.missing_code = await callError(client, "run_python", {});
		out.mistyped_code = await callError(client, "run_python", { code: 5 });
		out.mistyped_timeout = await callError(client, "run_python", { code: "1", timeout_s: "soon" });
		out.unknown_tool = await callError(client, "no_such_tool", {});
		out.oversize = await callError(client, "run_python", { code: "#" + "x".repeat(1 << 20) });
		out.ping = await client.ping();
		out.healthy = await call(client, "run_python", { code: "x" });
	} else if (scenario === "timeout") {
		out.set = await call(client, "run_python", { code: "kept = 1" });
		out.timeout = await call(client, "run_python", { code: "while True: pass", timeout_s: 1 });
		out.after = await call(client, "run_python", { code: "'kept' in globals()" });
	} else if (scenario === "memory") {
		out.memory = await call(client, "run_python", { code: "b = bytearray(1 << 30)\nlen(b)" });
		out.after = await call(client, "run_python", { code: "1 + 1" });
	} else if (scenario === "cancel") {
		const ac = new AbortController();
		const started = performance.now();
		const p = call(client, "run_python", { code: "import time\nwhile True: time.sleep(0.05)" }, { signal: ac.signal });
		setTimeout(() => ac.abort("test"), 1000);
		try {
			out.cancelled = await p;
		} catch (e) {
			out.cancelled = { rejected: String(e) };
		}
		out.cancel_ms = performance.now() - started;
		const t = performance.now();
		out.after = await call(client, "run_python", { code: "'alive'" });
		out.after_ms = performance.now() - t;
	} else if (scenario === "progress") {
		const progress = [];
		const pinged = [];
		const p = call(client, "run_python", {
			code: "import time\nfor i in range(5):\n    print('tick', i, flush=True)\n    time.sleep(1)\n'done'",
		}, { onprogress: (pr) => progress.push(pr), resetTimeoutOnProgress: true });
		// The server answers ping while the exec runs.
		await new Promise((r) => setTimeout(r, 500));
		const tp = performance.now();
		await client.ping();
		pinged.push(performance.now() - tp);
		out.result = await p;
		out.progress = progress;
		out.ping_ms = pinged;
	} else if (scenario === "codemode") {
		// nsbox mcp --mcp-server t="node server.mjs" (tests/mcp/server.mjs)
		out.tools = (await client.listTools()).tools;
		out.loop = await call(client, "run_python", {
			code: "total = 0\nfor i in range(100):\n    total += int(t.add(a=i, b=i))\ntotal",
		});
		out.structured = await call(client, "run_python", { code: "u = t.get_user(id='7')\n(type(u).__name__, u)" });
		out.values = await call(client, "run_python", {
			code: "(t.class_(), t.multi(), t.echo(value=(1, [2.5, {'k': None, '$x': 2**60}])), t.add(1, 2), t.x__init__())",
		});
		out.doc = await call(client, "run_python", { code: "print(t.add.__doc__)\nstr(t.get_user.__signature__)" });
		out.missing = await call(client, "run_python", { code: "t.add(a=1)" });
		out.mistyped = await call(client, "run_python", { code: "t.add(a='x', b=1)" });
		out.unknown_kw = await call(client, "run_python", { code: "t.add(a=1, b=2, c=3)" });
		out.no_json = await call(client, "run_python", { code: "t.echo(value=object())" });
		out.no_json_set = await call(client, "run_python", { code: "t.echo(value={1, 2})" });
		out.no_json_keys = await call(client, "run_python", { code: "t.echo(value={1: 2})" });
		out.no_json_bytes = await call(client, "run_python", { code: "t.echo(value=b'x')" });
		out.tool_error = await call(client, "run_python", {
			code: "import nsbox\ntry:\n    t.fail()\nexcept nsbox.ToolError as e:\n    r = 'caught: ' + str(e)\nr",
		});
		out.env = await call(client, "run_python", {
			code:
				"import os\n" +
				"procs = [open('/proc/' + p + '/cmdline', 'rb').read() for p in os.listdir('/proc') if p.isdigit()]\n" +
				"(os.environ.get('NSBOX_TEST_SECRET'), any(b'server.mjs' in c for c in procs), t.secret())",
		});
		out.calls = await call(client, "run_python", { code: "t.calls()" });
		const t0h = performance.now();
		out.hang = await call(client, "run_python", { code: "t.hang()" });
		out.hang_ms = performance.now() - t0h;
		out.after_hang = await call(client, "run_python", { code: "t.add(a=2, b=3)" });
		const ac = new AbortController();
		const p = call(client, "run_python", { code: "t.hang()" }, { signal: ac.signal });
		setTimeout(() => ac.abort("test"), 500);
		try {
			out.cancelled = await p;
		} catch (e) {
			out.cancelled = { rejected: String(e) };
		}
		out.after_cancel = await call(client, "run_python", { code: "t.add(a=20, b=22)" });
		out.time_limit = await call(client, "run_python", { code: "t.hang()", timeout_s: 1 });
		out.after_time_limit = await call(client, "run_python", { code: "t.add(a=1, b=1)" });
		out.session = await call(client, "new_session", {});
		const handle = JSON.parse(out.session.text.split("\n")[0]).session;
		out.in_session = await call(client, "run_python", { session: handle, code: "t.add(a=5, b=5)" });
		out.die = await call(client, "run_python", { code: "t.die()" });
		out.after_die = await call(client, "run_python", { code: "1 + 1" });
		out.dead = await call(client, "run_python", { code: "t.add(a=1, b=1)" });
	} else if (scenario === "structured") {
		// nsbox mcp --structured: the SDK checks structuredContent against
		// run_python's outputSchema.
		out.tools = (await client.listTools()).tools;
		for (const [k, code] of [["ok", "print('hi')\n[1, (2, 3)]"], ["exc", "1/0"], ["none", "x = 1"]]) {
			const r = await client.callTool({ name: "run_python", arguments: { code } });
			out[k] = { text: text(r), isError: !!r.isError, structured: r.structuredContent ?? null };
		}
	} else if (scenario === "rich") {
		// A matplotlib figure, a display() without an image and files in
		// /out; resources/read of the links, in the default session and in
		// one of new_session's.  The blocks are printed whole.
		const rich = async (args) => {
			const r = await client.callTool({ name: "run_python", arguments: args });
			return { content: r.content, isError: !!r.isError, structured: r.structuredContent ?? null };
		};
		const read = async (uri) => {
			try {
				return await client.readResource({ uri });
			} catch (e) {
				return { code: e.code, message: e.message };
			}
		};
		out.resources = await client.listResources();
		out.fig = await rich({
			code:
				"import matplotlib.pyplot as plt\n" +
				"fig, ax = plt.subplots(figsize=(4, 3), dpi=50)\n" +
				"ax.bar(['a', 'b', 'c'], [3, 1, 2])\n" +
				"display('a note')\n" +
				"open('/out/data.csv', 'w').write('x,y\\n1,2\\n')\n" +
				"open('/out/raw b\u00e9.bin', 'wb').write(bytes(range(256)))\n" +
				"print('drawn')",
		});
		for (const c of out.fig.content)
			if (c.type === "resource_link") out["read_" + c.name] = await read(c.uri);
		out.unchanged = await rich({ code: "1 + 1" });
		out.display_then_value = await rich({ code: "display('shown')\n5" });
		out.frame = await rich({ code: "import pandas as pd\npd.DataFrame({'a': [1, 2]})" });
		const handle = JSON.parse((await call(client, "new_session", {})).text.split("\n")[0]).session;
		out.handle = handle;
		out.in_session = await rich({ session: handle, code: "open('/out/s.txt', 'w').write('own')" });
		const link = out.in_session.content.find((c) => c.type === "resource_link");
		out.read_session = link ? await read(link.uri) : null;
		out.read_gone = await read(`nsbox://session/default/out/nothere.txt`);
		out.read_dotdot = await read(`nsbox://session/default/out/..%2Fetc%2Fpasswd`);
		out.read_slash = await read(`nsbox://session/default/out/../../etc/passwd`);
		out.read_other = await read("file:///etc/passwd");
		out.read_unknown = await read(`nsbox://session/${"0".repeat(32)}/out/s.txt`);
		await call(client, "close_session", { session: handle });
		out.read_closed = link ? await read(link.uri) : null;
		out.healthy = await call(client, "run_python", { code: "'ok'" });
	} else if (scenario === "bench") {
		const n = Number(process.env.NSBOX_MCP_BENCH_N || 200);
		out.first_ms = null;
		const t = performance.now();
		await call(client, "run_python", { code: "1+1" });
		out.first_call_ms = performance.now() - t;
		out.start_to_first_result_ms = performance.now() - t0;
		const times = [];
		for (let i = 0; i < n; i++) {
			const s = performance.now();
			await call(client, "run_python", { code: "1+1" });
			times.push(performance.now() - s);
		}
		times.sort((a, b) => a - b);
		out.n = n;
		out.p50_ms = times[Math.floor(n / 2)];
		out.p90_ms = times[Math.floor(n * 0.9)];
		out.p99_ms = times[Math.floor(n * 0.99)];
		if (serverArgs.includes("--mcp-server")) {
			// Code mode: one run_python making one tools/call through
			// the host, against the same round trip without it.
			const cm = [];
			await call(client, "run_python", { code: "t.add(a=1, b=1)" });
			for (let i = 0; i < n; i++) {
				const s = performance.now();
				await call(client, "run_python", { code: "t.add(a=1, b=1)" });
				cm.push(performance.now() - s);
			}
			cm.sort((a, b) => a - b);
			out.codemode_p50_ms = cm[Math.floor(n / 2)];
			out.codemode_p99_ms = cm[Math.floor(n * 0.99)];
			// 100 calls in one run_python: the per-call cost.
			const s = performance.now();
			await call(client, "run_python", { code: "for i in range(100): t.add(a=i, b=1)" });
			out.codemode_loop100_ms = performance.now() - s;
			// The baseline: the same tool called by this SDK client
			// straight, no nsbox in between.
			if (process.env.NSBOX_MCP_BENCH_SERVER) {
				const direct = new Client({ name: "nsbox-bench-direct", version: "1" });
				await direct.connect(new StdioClientTransport({ command: "node", args: [process.env.NSBOX_MCP_BENCH_SERVER] }));
				const d = [];
				await direct.callTool({ name: "add", arguments: { a: 1, b: 1 } });
				for (let i = 0; i < n; i++) {
					const s2 = performance.now();
					await direct.callTool({ name: "add", arguments: { a: 1, b: 1 } });
					d.push(performance.now() - s2);
				}
				d.sort((a, b) => a - b);
				out.direct_p50_ms = d[Math.floor(n / 2)];
				await direct.close();
			}
		}
	}
	await client.close();
	out.stderr = stderr;
}

main().then(
	() => process.stdout.write(JSON.stringify(out) + "\n"),
	(e) => {
		out.fatal = String(e && e.stack ? e.stack : e);
		process.stdout.write(JSON.stringify(out) + "\n");
		process.exit(1);
	},
);
