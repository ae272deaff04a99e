// `moxi plan --emit k8s` (docs/deploy.md): the manifests are validated against the published schemas by
// tests/cli/k8s-schema/validate.mjs (kubernetes-models: the Kubernetes OpenAPI schemas; prometheus-operator's
// PrometheusRule schema; a LeaderWorkerSet CRD schema written from the LWS API types), the alert rules by
// promtool, and their properties (GPUs, replicas, ranks, memory, the mpirun world) against `moxi plan --json`
// for the same layout. Broken manifests must fail the same validators.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"

namespace {

namespace fs = std::filesystem;
using moxi::testing::read_file;
using moxi::testing::run_moxi;
using moxi::testing::run_shell;
using nlohmann::json;

const std::string kSeed = std::string(MOXI_SOURCE_DIR) + "/configs/seed-2.8t.json";
const std::string kSchemaDir = std::string(MOXI_SOURCE_DIR) + "/tests/cli/k8s-schema";
const std::string kLayout = "--tp 8 --ep 64 --nodes 8 --device-memory 141 --context 131072";

class PlanK8sTest : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists("/usr/bin/node")) << "node is missing: run scripts/setup-k8s-test-deps.sh";
    ASSERT_TRUE(fs::exists(kSchemaDir + "/node_modules/kubernetes-models"))
        << "the validators are missing: run scripts/setup-k8s-test-deps.sh";
  }
  // Runs the validator on files; its JSON report and exit status.
  std::pair<int, json> validate(const std::string& files) {
    const auto r = run_shell("/usr/bin/node " + kSchemaDir + "/validate.mjs " + files + " 2>" + path("validate.err"));
    json report;
    try {
      report = json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "validator output is not JSON: " << e.what() << "\n" << r.out << read_file(path("validate.err"));
    }
    return {r.code, report};
  }
  static std::string errors_of(const json& report) {
    std::string s;
    for (const auto& d : report["documents"])
      for (const auto& e : d["errors"]) s += d.value("kind", "?") + " " + d.value("name", "?") + ": " + e.get<std::string>() + "\n";
    return s;
  }
  static const json& object(const json& report, const std::string& kind, const std::string& name) {
    for (const auto& d : report["documents"])
      if (d.value("kind", "") == kind && d.value("name", "") == name) return d["object"];
    static const json none;
    ADD_FAILURE() << "no " << kind << " " << name;
    return none;
  }
};

// The pod template's one container.
const json& container(const json& tmpl) { return tmpl["spec"]["containers"][0]; }

void expect_resources(const json& tmpl, int gpus, int64_t memory_gib) {
  for (const char* k : {"requests", "limits"}) {
    const auto& q = container(tmpl)["resources"][k];
    EXPECT_EQ(q["nvidia.com/gpu"], std::to_string(gpus)) << k;
    EXPECT_EQ(q["memory"], std::to_string(memory_gib) + "Gi") << k;
  }
}

TEST_F(PlanK8sTest, SeedManifestsAreValidAndMatchThePlan) {
  const std::string out = path("k8s");
  const auto r = run_moxi("plan --config " + kSeed + " " + kLayout +
                              " --emit k8s --out " + out + " --name seed --namespace llm --replicas 2 "
                              "--image registry.example/moxi:1 --model-pvc seed-weights",
                          "", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto plan_run = run_moxi("plan --config " + kSeed + " " + kLayout + " --json", "", dir_);
  ASSERT_EQ(plan_run.code, 0) << plan_run.err;
  const json plan = json::parse(plan_run.out);
  const int world = plan["layout"]["world_size"], nodes = plan["layout"]["nodes"];
  const int gpus = plan["layout"]["gpus_per_node"];
  ASSERT_EQ(world, 64);

  const auto [code, report] = validate(out + "/lws.yaml " + out + "/statefulset.yaml " + out + "/alerts.yaml");
  ASSERT_EQ(code, 0) << errors_of(report);
  EXPECT_TRUE(report["valid"].get<bool>());
  ASSERT_EQ(report["documents"].size(), 7u);  // LWS + API Service; headless + 2 StatefulSets + API; rule

  // Host memory per pod: the load bytes of the pod's ranks (ranks p*8 .. p*8+7), in GiB rounded up, + 16.
  const auto& per_rank = plan["load"]["bytes_per_rank"];
  ASSERT_EQ(per_rank.size(), size_t(world));
  uint64_t pod_bytes = 0;
  for (int pod = 0; pod < nodes; ++pod) {
    uint64_t sum = 0;
    for (int i = 0; i < gpus; ++i) sum += per_rank[size_t(pod * gpus + i)].get<uint64_t>();
    pod_bytes = std::max(pod_bytes, sum);
  }
  const int64_t memory = int64_t((pod_bytes + (uint64_t(1) << 30) - 1) >> 30) + 16;

  // LeaderWorkerSet: one group = the MPI world, one pod per node.
  const auto& lws = object(report, "LeaderWorkerSet", "seed");
  EXPECT_EQ(lws["metadata"]["namespace"], "llm");
  EXPECT_EQ(lws["spec"]["replicas"], 2);
  const auto& t = lws["spec"]["leaderWorkerTemplate"];
  EXPECT_EQ(t["size"], nodes);
  EXPECT_EQ(t["restartPolicy"], "RecreateGroupOnPodRestart");
  expect_resources(t["leaderTemplate"], gpus, memory);
  expect_resources(t["workerTemplate"], gpus, memory);
  const std::string script = container(t["leaderTemplate"])["command"][2];
  EXPECT_NE(script.find("mpirun --allow-run-as-root -np " + std::to_string(world) + " "), std::string::npos) << script;
  EXPECT_NE(script.find("moxi serve '/models/seed-2.8t' --tp 8 --ep 64 --pp 1 "), std::string::npos) << script;
  EXPECT_NE(script.find("$(seq 1 " + std::to_string(nodes - 1) + ")"), std::string::npos) << script;
  EXPECT_NE(script.find("$(hostname)-$i.seed.llm:" + std::to_string(gpus)), std::string::npos) << script;
  const auto& leader = container(t["leaderTemplate"]);
  for (const char* p : {"startupProbe", "readinessProbe", "livenessProbe"}) {
    EXPECT_EQ(leader[p]["httpGet"]["path"], "/health") << p;
    EXPECT_EQ(leader[p]["httpGet"]["port"], 8000) << p;
  }
  const auto& ann = t["leaderTemplate"]["metadata"]["annotations"];
  EXPECT_EQ(ann["prometheus.io/scrape"], "true");
  EXPECT_EQ(ann["prometheus.io/port"], "8000");
  EXPECT_EQ(ann["prometheus.io/path"], "/metrics");
  const auto& vol = t["leaderTemplate"]["spec"]["volumes"][0];
  EXPECT_EQ(vol["persistentVolumeClaim"]["claimName"], "seed-weights");
  EXPECT_EQ(vol["persistentVolumeClaim"]["readOnly"], true);
  EXPECT_EQ(leader["volumeMounts"][0]["readOnly"], true);
  EXPECT_EQ(leader["volumeMounts"][0]["mountPath"], "/models");

  // StatefulSet variant: 2 leaders, 2 x 7 workers, under the headless Service; the API Service picks leaders.
  const auto& headless = object(report, "Service", "seed-mpi");
  EXPECT_EQ(headless["spec"]["clusterIP"], "None");
  const auto& leaders = object(report, "StatefulSet", "seed-leader");
  const auto& workers = object(report, "StatefulSet", "seed-worker");
  EXPECT_EQ(leaders["spec"]["replicas"], 2);
  EXPECT_EQ(workers["spec"]["replicas"], 2 * (nodes - 1));
  for (const json* s : {&leaders, &workers}) {
    EXPECT_EQ((*s)["spec"]["serviceName"], "seed-mpi");
    for (const auto& [k, v] : (*s)["spec"]["selector"]["matchLabels"].items())
      EXPECT_EQ((*s)["spec"]["template"]["metadata"]["labels"][k], v) << k;
    expect_resources((*s)["spec"]["template"], gpus, memory);
  }
  const std::string sts_script = container(leaders["spec"]["template"])["command"][2];
  EXPECT_NE(sts_script.find("seed-worker-$((g * 7 + i - 1)).seed-mpi.llm:8"), std::string::npos) << sts_script;
  EXPECT_NE(sts_script.find("-np 64 "), std::string::npos);
  for (const auto& api : report["documents"]) {
    if (api.value("name", "") != "seed-api") continue;
    bool selects_workers = true;
    for (const auto& [k, v] : api["object"]["spec"]["selector"].items()) {
      EXPECT_EQ(t["leaderTemplate"]["metadata"]["labels"][k], v) << k;
      EXPECT_EQ(leaders["spec"]["template"]["metadata"]["labels"][k], v) << k;
      selects_workers = selects_workers && t["workerTemplate"]["metadata"]["labels"].value(k, "") == v;
    }
    EXPECT_FALSE(selects_workers) << "workers serve no HTTP and must get no API traffic";
  }

  // Alerts: the metric names are the ones serve/metrics.cpp exports; promtool accepts the rules.
  const auto& rule = object(report, "PrometheusRule", "seed-alerts");
  const std::string metrics_src = read_file(std::string(MOXI_SOURCE_DIR) + "/src/moxi/serve/metrics.cpp");
  std::set<std::string> alerts;
  const std::regex metric("moxi:[a-z_:]+");
  for (const auto& a : rule["spec"]["groups"][0]["rules"]) {
    alerts.insert(a["alert"].get<std::string>());
    const std::string expr = a["expr"];
    for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end; ++it) {
      std::string name = it->str();
      if (name.ends_with("_bucket")) name.resize(name.size() - 7);
      EXPECT_NE(metrics_src.find("\"" + name + "\""), std::string::npos) << name << " is not exported";
    }
  }
  for (const char* a : {"MoxiServerDown", "MoxiRankNotReady", "MoxiQueueGrowing", "MoxiCacheFull", "MoxiErrorRate"})
    EXPECT_TRUE(alerts.count(a)) << a;
  std::ofstream(path("rules.json")) << rule["spec"].dump();
  const auto promtool = run_shell("promtool check rules " + path("rules.json") + " 2>&1");
  EXPECT_EQ(promtool.code, 0) << promtool.out;
}

// Each broken field fails validation (the schemas are really applied), and a bad PromQL fails promtool.
TEST_F(PlanK8sTest, BrokenManifestsFailValidation) {
  const std::string out = path("k8s");
  const auto r = run_moxi("plan --config " + kSeed + " " + kLayout + " --emit k8s --out " + out +
                              " --model-host-path /srv/models",
                          "", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  {
    const auto [code, report] = validate(out + "/lws.yaml " + out + "/statefulset.yaml " + out + "/alerts.yaml");
    ASSERT_EQ(code, 0) << errors_of(report);
  }
  struct mutation {
    const char* file;
    std::string from, to;
    const char* why;
  };
  const mutation mutations[] = {
      {"lws.yaml", "    size: 8\n", "    size: \"eight\"\n", "LWS size must be an integer"},
      {"lws.yaml", "    size: 8\n", "    size: 0\n", "LWS size must be >= 1"},
      {"lws.yaml", "restartPolicy: RecreateGroupOnPodRestart", "restartPolicy: RestartAll", "LWS restartPolicy enum"},
      {"lws.yaml", "  startupPolicy: LeaderCreated\n", "  startupPolicy: LeaderCreated\n  groupSize: 8\n",
       "unknown LWS spec field"},
      {"lws.yaml", "containerPort: 8000", "containerPort: http", "containerPort must be an integer"},
      {"lws.yaml", "              - name: model\n", "              - nam: model\n", "a volume needs a name"},
      {"statefulset.yaml", "  selector:\n    matchLabels:", "  matchLabels:", "a StatefulSet needs a selector"},
      {"statefulset.yaml", "periodSeconds: 10", "periodSeconds: ten", "periodSeconds must be an integer"},
      {"statefulset.yaml", "  clusterIP: None\n", "  clusterIP: [None]\n", "clusterIP must be a string"},
      {"alerts.yaml", "expr: ", "exp: ", "a rule needs expr"},
      {"lws.yaml", "kind: LeaderWorkerSet", "kind: LeaderWorkerSets", "unknown kind"},
      {"lws.yaml", "  replicas: 1\n", "  replicas: 1\n bad: [\n", "not YAML"},
  };
  for (const auto& m : mutations) {
    SCOPED_TRACE(m.why);
    std::string text = read_file(out + "/" + m.file);
    const auto at = text.find(m.from);
    ASSERT_NE(at, std::string::npos) << m.from;
    text.replace(at, m.from.size(), m.to);
    const std::string broken = path(std::string("broken-") + m.file);
    std::ofstream(broken) << text;
    const auto [code, report] = validate(broken);
    EXPECT_EQ(code, 1);
    EXPECT_FALSE(report.value("valid", true));
  }
  // promtool rejects a broken expression.
  const auto [code, report] = validate(out + "/alerts.yaml");
  ASSERT_EQ(code, 0);
  json spec;
  for (const auto& d : report["documents"])
    if (d["kind"] == "PrometheusRule") spec = d["object"]["spec"];
  spec["groups"][0]["rules"][0]["expr"] = "up{namespace=\"default\"} == == 0";
  std::ofstream(path("bad-rules.json")) << spec.dump();
  EXPECT_NE(run_shell("promtool check rules " + path("bad-rules.json") + " >/dev/null 2>&1").code, 0);
}

TEST_F(PlanK8sTest, StdoutVariantsAndRefusals) {
  // One variant and the alerts on stdout: a valid stream.
  for (const char* variant : {"lws", "statefulset"}) {
    SCOPED_TRACE(variant);
    const auto r = run_moxi("plan --config " + kSeed + " --tp 8 --ep 8 --pp 8 --nodes 8 --emit k8s --model-pvc w "
                            "--k8s-variant " + std::string(variant),
                            "", dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("kind: PrometheusRule"), std::string::npos);
    EXPECT_NE(r.out.find(std::string(variant) == "lws" ? "kind: LeaderWorkerSet" : "kind: StatefulSet"),
              std::string::npos);
    EXPECT_NE(r.out.find("--tp 8 --ep 8 --pp 8 "), std::string::npos);
    const std::string file = path(std::string(variant) + ".yaml");
    std::ofstream(file) << r.out;
    const auto [code, report] = validate(file);
    EXPECT_EQ(code, 0) << errors_of(report);
  }
  // No model volume, or both: a usage error. A layout that does not fit: exit 1, nothing written.
  EXPECT_EQ(run_moxi("plan --config " + kSeed + " " + kLayout + " --emit k8s", "", dir_).code, 2);
  EXPECT_EQ(run_moxi("plan --config " + kSeed + " " + kLayout + " --emit k8s --model-pvc a --model-host-path /b", "",
                     dir_)
                .code,
            2);
  EXPECT_EQ(run_moxi("plan --config " + kSeed + " " + kLayout + " --emit k8s --model-pvc w --name Bad_Name", "", dir_)
                .code,
            2);
  const auto small = run_moxi("plan --config " + kSeed + " --tp 8 --device-memory 141 --emit k8s --model-pvc w --out " +
                                  path("none"),
                              "", dir_);
  EXPECT_EQ(small.code, 1) << small.err;
  EXPECT_FALSE(fs::exists(path("none")));
  // An existing output is refused without --force.
  const std::string args = "plan --config " + kSeed + " " + kLayout + " --emit k8s --model-pvc w --out " + path("o");
  ASSERT_EQ(run_moxi(args, "", dir_).code, 0);
  EXPECT_EQ(run_moxi(args, "", dir_).code, 2);
  EXPECT_EQ(run_moxi(args + " --force", "", dir_).code, 0);
}

}  // namespace
