// Drives `nsbox mcp` with the official TypeScript SDK's v2 client package
// (@modelcontextprotocol/client), which speaks the stateless 2026-07-28
// revision: server/discover, and the version and capabilities in each
// request's _meta.  Prints one JSON object for tests/integ/test_mcp.py.
//   node client2.mjs NSBOX MODE [SERVER_ARG...]     MODE: pin | auto | legacy
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [nsbox, mode, ...serverArgs] = process.argv.slice(2);
const out = {};
const text = (r) => (r.content || []).map((c) => c.text).join("\n");

async function main() {
	const transport = new StdioClientTransport({ command: nsbox, args: ["mcp", ...serverArgs], stderr: "pipe" });
	let stderr = "";
	transport.stderr?.on("data", (d) => (stderr += d));
	const client = new Client(
		{ name: "nsbox-test-v2", version: "1" },
		{ versionNegotiation: mode === "pin" ? { mode: { pin: "2026-07-28" } } : { mode } },
	);
	await client.connect(transport);
	out.version = client.getNegotiatedProtocolVersion();
	out.server = client.getServerVersion();
	out.capabilities = client.getServerCapabilities();
	out.tools = (await client.listTools()).tools.map((t) => t.name);
	const r1 = await client.callTool({ name: "run_python", arguments: { code: "x = 6 * 7\nx" } });
	out.run = { text: text(r1), isError: !!r1.isError, meta: r1._meta ?? null };
	const r2 = await client.callTool({ name: "run_python", arguments: { code: "x + 1" } });
	out.state = { text: text(r2), isError: !!r2.isError };
	const progress = [];
	const r3 = await client.callTool(
		{ name: "run_python", arguments: { code: "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(1)\n'done'" } },
		{ onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true },
	);
	out.progress = { text: text(r3), n: progress.length, messages: progress.map((p) => p.message) };
	const ac = new AbortController();
	const p = client.callTool({ name: "run_python", arguments: { code: "import time\nwhile True: time.sleep(0.05)" } }, { signal: ac.signal });
	setTimeout(() => ac.abort("test"), 500);
	try {
		out.cancelled = await p;
	} catch (e) {
		out.cancelled = { rejected: String(e) };
	}
	const r4 = await client.callTool({ name: "run_python", arguments: { code: "'alive'" } });
	out.after_cancel = { text: text(r4), isError: !!r4.isError };
	if (out.version !== "2026-07-28") {
		await client.ping(); // not a method of 2026-07-28
		out.ping = true;
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
