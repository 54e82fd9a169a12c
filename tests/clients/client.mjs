// client.mjs -- calls Smolder's services with connect-es, the Connect
// project's own client library, over three protocols: Connect (binary),
// gRPC-web (binary) and gRPC-web (JSON).  Run by
// tests/integration/test_grpc_web.py:
//
//   node client.mjs <base URL> <FileDescriptorSet file> <calls.json> [gRPC URL]
//
// With a gRPC URL (Smolder's -grpc.listen-address), gRPC over HTTP/2
// cleartext is a fourth and fifth protocol: binary (application/grpc+proto)
// and JSON (application/grpc+json).
//
// calls.json: [{"service": "querier.v1.QuerierService", "method":
// "SelectSeries", "request": {...proto3 JSON...}, "headers": {...}}, ...].
// The services' descriptors come from the set protoc wrote from the
// repository's .proto files, so no code is generated.  Prints one JSON
// array: per call, per protocol, {"response": <proto3 JSON>} or
// {"error": {"code": "<Connect code>", "message": "..."}}.
import { readFileSync } from "node:fs";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { createFileRegistry, fromBinary, fromJson, toJson } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";

const [baseUrl, setFile, callsFile, grpcUrl] = process.argv.slice(2);
const registry = createFileRegistry(
  fromBinary(FileDescriptorSetSchema, readFileSync(setFile)));
const calls = JSON.parse(readFileSync(callsFile, "utf8"));

const protocols = {
  "connect": createConnectTransport({ baseUrl, httpVersion: "1.1",
                                      useBinaryFormat: true }),
  "grpc-web": createGrpcWebTransport({ baseUrl, httpVersion: "1.1",
                                       useBinaryFormat: true }),
  "grpc-web-json": createGrpcWebTransport({ baseUrl, httpVersion: "1.1",
                                            useBinaryFormat: false }),
};
if (grpcUrl) {
  protocols["grpc"] = createGrpcTransport({ baseUrl: grpcUrl,
                                            httpVersion: "2",
                                            useBinaryFormat: true });
  protocols["grpc-json"] = createGrpcTransport({ baseUrl: grpcUrl,
                                                 httpVersion: "2",
                                                 useBinaryFormat: false });
}

// Connect's code names are snake_case ("invalid_argument"); Code's keys
// are CamelCase.
function codeName(c) {
  return Code[c].replace(/[A-Z]/g, (m, i) => (i ? "_" : "") + m.toLowerCase());
}

const out = [];
for (const call of calls) {
  const service = registry.getService(call.service);
  if (!service) throw new Error("no service " + call.service);
  const method = service.methods.find((m) => m.name === call.method);
  if (!method) throw new Error("no method " + call.method);
  const req = fromJson(method.input, call.request ?? {}, { registry });
  const row = {};
  for (const [name, transport] of Object.entries(protocols)) {
    const client = createClient(service, transport);
    try {
      const resp = await client[method.localName](req,
                                                 { headers: call.headers ?? {} });
      row[name] = { response: toJson(method.output, resp, { registry }) };
    } catch (e) {
      const ce = ConnectError.from(e);
      row[name] = { error: { code: codeName(ce.code), message: ce.rawMessage } };
    }
  }
  out.push(row);
}
process.stdout.write(JSON.stringify(out), () => process.exit(0));
