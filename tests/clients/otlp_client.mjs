// otlp_client.mjs -- sends real pprof profiles to Smolder as OpenTelemetry
// profiles (OTLP/HTTP, POST /v1development/profiles), built with
// protobuf-es over the upstream opentelemetry-proto files that protoc
// compiled into a descriptor set (no generated code).  Run by
// tests/integration/test_otlp.py:
//
//   node otlp_client.mjs <base URL> <FileDescriptorSet> <jobs.json>
//
// jobs.json: [{"file": "x.pb.gz", "service": "svc", "time_ms": 123,
// "gzip": true, "headers": {...}, "profile_id": "<32 hex>", "corrupt":
// "stack", "out": "<path>", "json": true}, ...]; "json" sends OTLP's JSON
// encoding (ids in hex); "out" writes the request body there
// instead of sending it (tests/fuzz/seeds/otlp); "grpc": "<URL>" sends it
// over gRPC instead (ProfilesService/Export on Smolder's
// -grpc.listen-address, with connect-es's gRPC transport; "gzip"
// compresses the message), and answers {"status": 200} or {"status": -1,
// "code": "<Connect code>", "body": <base64 of the message>}.  Each pprof becomes one
// ExportProfilesServiceRequest the way the Collector's pprof translator
// maps it: the dictionary holds the pprof's strings, mappings, functions
// and locations (index 0 the zero value), one stack per distinct location
// list, string labels as attributes, numeric labels as int attributes,
// span_id labels (16 hex digits) as Links; one OTLP Profile per pprof
// sample type; the
// resource carries service.name.  Prints per job {"status", "body"}.
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync, gzipSync } from "node:zlib";
import { createFileRegistry, create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createGrpcTransport, compressionGzip } from "@connectrpc/connect-node";

const [baseUrl, setFile, jobsFile] = process.argv.slice(2);
const reg = createFileRegistry(
  fromBinary(FileDescriptorSetSchema, readFileSync(setFile)));
const P = "opentelemetry.proto.profiles.v1development.";
const M = (n) => reg.getMessage(n);
const Pprof = M("google.v1.Profile");
const Req = M("opentelemetry.proto.collector.profiles.v1development." +
              "ExportProfilesServiceRequest");

function convert(pp, service, timeMs, profileId) {
  const strings = pp.stringTable.slice();
  const str = (s) => {
    let i = strings.indexOf(s);
    if (i < 0) { strings.push(s); i = strings.length - 1; }
    return i;
  };
  const mapIdx = new Map(), fnIdx = new Map(), locIdx = new Map();
  const mappingTable = [create(M(P + "Mapping"))];
  for (const m of pp.mapping) {
    mapIdx.set(m.id, mappingTable.length);
    mappingTable.push(create(M(P + "Mapping"), {
      memoryStart: m.memoryStart, memoryLimit: m.memoryLimit,
      fileOffset: m.fileOffset, filenameStrindex: Number(m.filename) }));
  }
  const functionTable = [create(M(P + "Function"))];
  for (const f of pp.function) {
    fnIdx.set(f.id, functionTable.length);
    functionTable.push(create(M(P + "Function"), {
      nameStrindex: Number(f.name), systemNameStrindex: Number(f.systemName),
      filenameStrindex: Number(f.filename), startLine: f.startLine }));
  }
  const locationTable = [create(M(P + "Location"))];
  for (const l of pp.location) {
    locIdx.set(l.id, locationTable.length);
    locationTable.push(create(M(P + "Location"), {
      mappingIndex: mapIdx.get(l.mappingId) ?? 0, address: l.address,
      lines: l.line.map((ln) => create(M(P + "Line"), {
        functionIndex: fnIdx.get(ln.functionId) ?? 0, line: ln.line })) }));
  }
  const stackTable = [create(M(P + "Stack"))], stackIdx = new Map();
  const attrTable = [create(M(P + "KeyValueAndUnit"))], attrIdx = new Map();
  const linkTable = [create(M(P + "Link"))], linkIdx = new Map();
  const samples = pp.sample.map((s) => {
    const locs = s.locationId.map((id) => locIdx.get(id));
    const key = locs.join(",");
    if (!stackIdx.has(key)) {
      stackIdx.set(key, stackTable.length);
      stackTable.push(create(M(P + "Stack"), { locationIndices: locs }));
    }
    const attrs = [];
    let link = 0;
    for (const lb of s.label) {
      const k = strings[Number(lb.key)];
      if (k === "span_id" && lb.str &&
          /^[0-9a-fA-F]{16}$/.test(strings[Number(lb.str)])) {
        const hex = strings[Number(lb.str)];
        if (!linkIdx.has(hex)) {
          linkIdx.set(hex, linkTable.length);
          linkTable.push(create(M(P + "Link"), {
            traceId: new Uint8Array(16).fill(1),
            spanId: Uint8Array.from(Buffer.from(hex, "hex")) }));
        }
        link = linkIdx.get(hex);
        continue;
      }
      const val = lb.str ? { value: { case: "stringValue",
                                      value: strings[Number(lb.str)] } }
                         : { value: { case: "intValue", value: lb.num } };
      const ak = k + "\u0000" + JSON.stringify(val, (_, v) =>
        typeof v === "bigint" ? v.toString() : v);
      if (!attrIdx.has(ak)) {
        attrIdx.set(ak, attrTable.length);
        attrTable.push(create(M(P + "KeyValueAndUnit"), {
          keyStrindex: Number(lb.key),
          value: create(M("opentelemetry.proto.common.v1.AnyValue"), val) }));
      }
      attrs.push(attrIdx.get(ak));
    }
    return { stack: stackIdx.get(key), attrs, link, values: s.value };
  });
  const timeNs = BigInt(timeMs) * 1000000n;
  const profiles = pp.sampleType.map((st, k) => create(M(P + "Profile"), {
    sampleType: create(M(P + "ValueType"), {
      typeStrindex: Number(st.type), unitStrindex: Number(st.unit) }),
    periodType: pp.periodType ? create(M(P + "ValueType"), {
      typeStrindex: Number(pp.periodType.type),
      unitStrindex: Number(pp.periodType.unit) }) : undefined,
    period: pp.period,
    timeUnixNano: timeNs,
    durationNano: pp.durationNanos,
    profileId: profileId ? Uint8Array.from(Buffer.from(profileId, "hex"))
                         : new Uint8Array(0),
    samples: samples.map((s) => create(M(P + "Sample"), {
      stackIndex: s.stack, attributeIndices: s.attrs, linkIndex: s.link,
      values: [s.values[k]] })),
  }));
  const svcKey = "service.name";
  return create(Req, {
    resourceProfiles: [create(M(P + "ResourceProfiles"), {
      resource: create(M("opentelemetry.proto.resource.v1.Resource"), {
        attributes: [create(M("opentelemetry.proto.common.v1.KeyValue"), {
          key: svcKey,
          value: create(M("opentelemetry.proto.common.v1.AnyValue"), {
            value: { case: "stringValue", value: service } }) })] }),
      scopeProfiles: [create(M(P + "ScopeProfiles"), { profiles })],
    })],
    dictionary: create(M(P + "ProfilesDictionary"), {
      mappingTable, locationTable, functionTable, linkTable,
      stringTable: strings, attributeTable: attrTable, stackTable }),
  });
}

const jobs = JSON.parse(readFileSync(jobsFile, "utf8"));
const out = [];
for (const job of jobs) {
  let raw = readFileSync(job.file);
  if (raw[0] === 0x1f && raw[1] === 0x8b) raw = gunzipSync(raw);
  const req = convert(fromBinary(Pprof, raw), job.service, job.time_ms,
                      job.profile_id);
  // "stack": a Sample index outside its table, as a request of an older
  // alpha format (its Sample fields numbered differently) decodes
  if (job.corrupt === "stack")
    req.resourceProfiles[0].scopeProfiles[0].profiles[0].samples[0]
      .stackIndex = 99999;
  let body, headers;
  if (job.json) {
    // OTLP's JSON: proto3 JSON, but trace, span and profile ids in hex
    const hexIds = (o) => {
      if (Array.isArray(o)) return o.map(hexIds);
      if (o && typeof o === "object") {
        for (const [k, v] of Object.entries(o))
          o[k] = ["traceId", "spanId", "profileId"].includes(k) &&
            typeof v === "string" ? Buffer.from(v, "base64").toString("hex")
                                  : hexIds(v);
      }
      return o;
    };
    body = Buffer.from(JSON.stringify(hexIds(toJson(Req, req, {
      registry: reg }))));
    headers = { "Content-Type": "application/json", ...(job.headers ?? {}) };
  } else {
    body = toBinary(Req, req);
    headers = { "Content-Type": "application/x-protobuf",
                ...(job.headers ?? {}) };
  }
  if (job.out) {             // the bytes only (fuzz seeds)
    writeFileSync(job.out, body);
    out.push({ status: 0, body: "", bytes: body.length });
    continue;
  }
  if (job.grpc) {
    const svc = reg.getService(
      "opentelemetry.proto.collector.profiles.v1development.ProfilesService");
    const client = createClient(svc, createGrpcTransport({
      baseUrl: job.grpc, httpVersion: "2", useBinaryFormat: true,
      sendCompression: job.gzip ? compressionGzip : undefined }));
    try {
      await client.export(req, { headers: job.headers ?? {} });
      out.push({ status: 200, body: "", bytes: toBinary(Req, req).length });
    } catch (e) {
      const ce = ConnectError.from(e);
      out.push({ status: -1, code: Code[ce.code],
                 body: Buffer.from(ce.rawMessage).toString("base64") });
    }
    continue;
  }
  if (job.gzip) {
    body = gzipSync(body);
    headers["Content-Encoding"] = "gzip";
  }
  const resp = await fetch(baseUrl + "/v1development/profiles",
                           { method: "POST", headers, body });
  out.push({ status: resp.status,
             body: Buffer.from(await resp.arrayBuffer()).toString("base64"),
             bytes: body.length });
}
process.stdout.write(JSON.stringify(out), () => process.exit(0));
