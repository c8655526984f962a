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
