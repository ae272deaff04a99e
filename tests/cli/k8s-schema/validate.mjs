// Validates Kubernetes manifests (multi-document YAML files given as arguments) against published schemas:
// core/v1 and apps/v1 objects with kubernetes-models (the Kubernetes OpenAPI schemas compiled to ajv
// validators), PrometheusRule with @kubernetes-models/prometheus-operator (prometheus-operator's CRD schema),
// LeaderWorkerSet with leaderworkerset-crd.json (a CRD schema written for moxi, see its $comment) plus the
// Kubernetes PodTemplateSpec schema for its leader and worker templates. Prints a JSON report (every
// document, parsed, with its errors) and exits 1 if any document or YAML stream is invalid.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { Service } from "kubernetes-models/v1/Service";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { CustomResourceDefinition } from "kubernetes-models/apiextensions.k8s.io/v1/CustomResourceDefinition";
import { validate as validatePodTemplateSpec } from "kubernetes-models/_schemas/IoK8sApiCoreV1PodTemplateSpec";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { formats } from "@kubernetes-models/validate";
import Ajv from "ajv";

const here = dirname(fileURLToPath(import.meta.url));
const crd = JSON.parse(readFileSync(join(here, "leaderworkerset-crd.json"), "utf8"));
delete crd.$comment;
new CustomResourceDefinition(crd).validate();  // the hand-written CRD is itself a valid CRD object
const ajv = new Ajv({ strict: false, allErrors: true });
ajv.addKeyword("x-kubernetes-preserve-unknown-fields");
for (const [name, format] of Object.entries(formats)) ajv.addFormat(name, format);  // int32, int64, ...
// Strict field validation: an object schema that lists its properties admits no other (what the API server's
// strict field validation does with the fields a structural schema does not declare).
function strict(schema) {
  if (schema && typeof schema === "object") {
    if (schema.properties && !schema["x-kubernetes-preserve-unknown-fields"]) schema.additionalProperties = false;
    for (const v of Object.values(schema)) strict(v);
  }
  return schema;
}
const validateLws = ajv.compile(strict(structuredClone(crd.spec.versions[0].schema.openAPIV3Schema)));

function modelErrors(Model, doc) {
  try {
    new Model(doc).validate();
    return [];
  } catch (e) {
    return [String(e.message || e)];
  }
}

function lwsErrors(doc) {
  const errors = [];
  if (!validateLws(doc))
    for (const e of validateLws.errors) errors.push(`${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
  const t = doc?.spec?.leaderWorkerTemplate ?? {};
  for (const key of ["leaderTemplate", "workerTemplate"]) {
    if (t[key] === undefined) continue;
    if (!validatePodTemplateSpec(t[key]))
      for (const e of validatePodTemplateSpec.errors)
        errors.push(`/spec/leaderWorkerTemplate/${key}${e.instancePath} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`);
  }
  return errors;
}

const validators = {
  "v1/Service": (d) => modelErrors(Service, d),
  "apps/v1/StatefulSet": (d) => modelErrors(StatefulSet, d),
  "monitoring.coreos.com/v1/PrometheusRule": (d) => modelErrors(PrometheusRule, d),
  "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet": lwsErrors,
};

const report = { valid: true, documents: [], streams: [] };
for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"), { prettyErrors: false });
  const stream = { file, errors: [] };
  if (!Array.isArray(docs)) stream.errors.push("not a YAML stream");
  for (const [index, d] of (Array.isArray(docs) ? docs : []).entries()) {
    const entry = { file, index, errors: d.errors.map((e) => `YAML: ${e.message}`) };
    const obj = entry.errors.length ? null : d.toJS();
    if (obj === null || typeof obj !== "object") {
      if (!entry.errors.length) entry.errors.push("empty document or not an object");
    } else {
      entry.apiVersion = obj.apiVersion;
      entry.kind = obj.kind;
      entry.name = obj.metadata?.name;
      const check = validators[`${obj.apiVersion}/${obj.kind}`];
      if (!check) entry.errors.push(`no schema for ${obj.apiVersion} ${obj.kind}`);
      else entry.errors.push(...check(obj));
      entry.object = obj;
    }
    entry.valid = entry.errors.length === 0;
    report.valid &&= entry.valid;
    report.documents.push(entry);
  }
  if (stream.errors.length) report.valid = false;
  report.streams.push(stream);
}
process.stdout.write(JSON.stringify(report, null, 1) + "\n");
process.exit(report.valid ? 0 : 1);
