// A small MCP server on stdio, written with the official TypeScript SDK's
// server side (McpServer + StdioServerTransport): the "other server" whose
// tools nsbox mcp's code mode makes callable from sandboxed Python
// (tests/integ/test_mcp.py, test_code_mode*).
//   node server.mjs
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "nsbox-test-server", version: "1" });
let calls = 0;
const text = (t) => ({ content: [{ type: "text", text: String(t) }] });

server.registerTool(
	"add",
	{
		description: "Add two integers.\nA second line that the listing leaves out.",
		inputSchema: { a: z.number().int().describe("the first"), b: z.number().int() },
		annotations: { readOnlyHint: true, openWorldHint: false },
	},
	async ({ a, b }) => {
		calls++;
		return text(a + b);
	},
);
server.registerTool(
	"get-user",
	{
		description: "A user record, as structured content.",
		inputSchema: { id: z.string(), verbose: z.boolean().optional() },
		outputSchema: { id: z.string(), name: z.string(), tags: z.array(z.string()), $ref: z.string() },
		annotations: { readOnlyHint: true, openWorldHint: false },
	},
	async ({ id }) => {
		calls++;
		const out = { id, name: "user " + id, tags: ["a", "b"], $ref: "#/users/" + id };
		return { content: [{ type: "text", text: JSON.stringify(out) }], structuredContent: out };
	},
);
server.registerTool(
	"echo",
	{ description: "Echo the value back as JSON text.", inputSchema: { value: z.any() }, annotations: { openWorldHint: false, readOnlyHint: true } },
	async ({ value }) => text(JSON.stringify(value)),
);
server.registerTool(
	"class",
	{ description: "A tool whose name is a Python keyword.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => text("class ok"),
);
server.registerTool(
	"__init__",
	{ description: "A dunder name.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => text("dunder ok"),
);
server.registerTool(
	"multi",
	{ description: "Two text blocks and an image.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => ({
		content: [
			{ type: "text", text: "one" },
			{ type: "text", text: "two" },
			{ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" },
		],
	}),
);
server.registerTool(
	"fail",
	{ description: "Always fails.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => ({ content: [{ type: "text", text: "it failed on purpose" }], isError: true }),
);
server.registerTool(
	"secret",
	{ description: "The server's own environment variable NSBOX_TEST_SECRET.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => text(process.env.NSBOX_TEST_SECRET ?? "(unset)"),
);
server.registerTool(
	"calls",
	{ description: "How many add and get-user calls this server answered.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => text(calls),
);
server.registerTool(
	"big",
	{ description: "A text of n bytes.", inputSchema: { n: z.number().int() }, annotations: { readOnlyHint: true, openWorldHint: false } },
	async ({ n }) => text("x".repeat(n)),
);
server.registerTool(
	"hang",
	{ description: "Never answers.", annotations: { readOnlyHint: true, openWorldHint: false } },
	() => new Promise(() => {}),
);
server.registerTool(
	"die",
	{ description: "Exits in the middle of the call.", annotations: { readOnlyHint: true, openWorldHint: false } },
	async () => {
		process.exit(3);
	},
);

await server.connect(new StdioServerTransport());
