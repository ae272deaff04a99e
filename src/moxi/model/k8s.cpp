// Kubernetes manifests for a plan's layout (see k8s.h and docs/deploy.md). Field names and semantics follow
// the Kubernetes API reference (core/v1 Pod, Service, Probe, Volume; apps/v1 StatefulSet), the
// LeaderWorkerSet API (kubernetes-sigs/lws, leaderworkerset.x-k8s.io/v1: spec.replicas,
// spec.leaderWorkerTemplate.{size, restartPolicy, leaderTemplate, workerTemplate}, spec.startupPolicy,
// spec.rolloutStrategy) and prometheus-operator's PrometheusRule (monitoring.coreos.com/v1: spec.groups[].rules[]
// with alert, expr, for, labels, annotations). tests/cli/plan-k8s-test.cpp validates the output against the
// published schemas.
#include "moxi/model/k8s.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <sstream>

#include "moxi/base/error.h"

namespace moxi::model {
namespace {

using ojson = nlohmann::ordered_json;

// ---- YAML ----

bool plain_safe(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '/')) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '/' || ch == '-'))
      return false;
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  // YAML 1.1 booleans and nulls (read by many Kubernetes tools) stay quoted.
  for (const char* word : {"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
    if (lower == word) return false;
  return true;
}

std::string scalar(const ojson& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return plain_safe(s) ? s : ojson(s).dump();  // JSON escapes are YAML double-quoted escapes
  }
  return v.dump();  // numbers, booleans, null
}

// A literal block for multi-line strings whose lines need no escaping.
bool literal_block(const std::string& s) {
  if (s.find('\n') == std::string::npos || s.front() == ' ' || s.front() == '\n') return false;
  if (s.size() >= 2 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') return false;
  for (unsigned char ch : s)
    if ((ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f) return false;
  for (size_t at = 0; (at = s.find('\n', at)) != std::string::npos; ++at)
    if (at > 0 && (s[at - 1] == ' ' || s[at - 1] == '\t')) return false;  // trailing blanks
  return true;
}

void emit(std::string& out, const ojson& v, int indent);

void emit_value_after_key(std::string& out, const ojson& v, int indent) {
  if (v.is_object() && !v.empty()) {
    out += "\n";
    emit(out, v, indent + 2);
  } else if (v.is_array() && !v.empty()) {
    out += "\n";
    emit(out, v, indent + 2);
  } else if (v.is_object()) {
    out += " {}\n";
  } else if (v.is_array()) {
    out += " []\n";
  } else if (v.is_string() && literal_block(v.get_ref<const std::string&>())) {
    const auto& s = v.get_ref<const std::string&>();
    out += s.back() == '\n' ? " |\n" : " |-\n";
    std::istringstream lines(s);
    for (std::string line; std::getline(lines, line);)
      out += (line.empty() ? "" : std::string(size_t(indent + 2), ' ') + line) + "\n";
  } else {
    out += " " + scalar(v) + "\n";
  }
}

void emit(std::string& out, const ojson& v, int indent) {
  const std::string pad(size_t(indent), ' ');
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      out += pad + scalar(ojson(key)) + ":";
      emit_value_after_key(out, value, indent);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- " then the first key on the same line, the others under it.
        std::string sub;
        emit(sub, item, indent + 2);
        out += pad + "- " + sub.substr(size_t(indent + 2));
      } else if (item.is_array() && !item.empty()) {
        out += pad + "- " + item.dump() + "\n";  // flow style: JSON is YAML
      } else {
        out += pad + "-";
        emit_value_after_key(out, item, indent);
      }
    }
  } else {
    out += pad + scalar(v) + "\n";
  }
}

// ---- names and quantities ----

// RFC 1035 label (Service names, and the start of pod host names), RFC 1123 label (namespaces).
void check_label(const std::string& what, const std::string& s, size_t max_len) {
  static const std::regex re("[a-z]([-a-z0-9]*[a-z0-9])?");
  if (s.size() > max_len || !std::regex_match(s, re))
    throw usage_error("plan: --" + what + " '" + s + "' must be lower-case letters, digits and '-', start with a letter, end " +
                "with a letter or digit, and have at most " + std::to_string(max_len) + " characters");
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char ch : s) r += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return r + "'";
}

struct group_shape {
  int pods = 1;           // pods per group, one per node
  int ranks_per_pod = 1;  // gpus_per_node
  int world = 1;
};

ojson labels(const k8s_options& o, const char* component) {
  return ojson{{"app.kubernetes.io/name", "moxi"},
               {"app.kubernetes.io/instance", o.name},
               {"app.kubernetes.io/component", component}};
}

ojson metadata(const k8s_options& o, const std::string& name, const char* component) {
  return ojson{{"name", name}, {"namespace", o.ns}, {"labels", labels(o, component)}};
}

std::string serve_command(const plan_options& l, const k8s_options& o, const group_shape& g) {
  return "mpirun --allow-run-as-root -np " + std::to_string(g.world) + " --host \"$hosts\" --bind-to none \\\n"
         "  moxi serve " + shell_quote(o.model_path) + " --tp " + std::to_string(l.tp) + " --ep " +
         std::to_string(l.ep) + " --pp " + std::to_string(l.pp) + " --host 0.0.0.0 --port " +
         std::to_string(o.port) + "\n";
}

const char* kSshSetup =
    "mkdir -p /root/.ssh && cp /etc/moxi-ssh/* /root/.ssh/ && chmod 700 /root/.ssh && chmod 600 /root/.ssh/*\n";

// The leader's script: its group's host list (the leader by its own host name, so mpirun starts its ranks
// locally), a wait until every worker's sshd answers, then mpirun over the group. `workers` is a shell
// snippet that appends "$host:slots" entries for the workers to $hosts.
std::string leader_script(const plan_options& l, const k8s_options& o, const group_shape& g,
                          const std::string& workers) {
  const std::string slots = std::to_string(g.ranks_per_pod);
  return "# moxi group leader: MPI rank 0 of " + std::to_string(g.world) + " ranks on " + std::to_string(g.pods) +
         " pods of " + slots + " (tp " + std::to_string(l.tp) + ", ep " + std::to_string(l.ep) + ", pp " +
         std::to_string(l.pp) + ").\n"
         "set -euo pipefail\n" +
         kSshSetup + "hosts=\"$(hostname):" + slots + "\"\n" + workers +
         "for h in ${hosts//,/ }; do\n"
         "  h=${h%%:*}\n"
         "  [ \"$h\" = \"$(hostname)\" ] && continue\n"
         "  until ssh -o BatchMode=yes -o ConnectTimeout=5 \"$h\" true; do echo \"waiting for $h\"; sleep 5; done\n"
         "done\n"
         "exec " + serve_command(l, o, g);
}

std::string worker_script() {
  return std::string("# moxi group worker: sshd for the leader's mpirun, which starts this pod's ranks.\n"
                     "set -euo pipefail\n") +
         kSshSetup + "mkdir -p /run/sshd && ssh-keygen -A\nexec /usr/sbin/sshd -D -e\n";
}

ojson http_probe(const k8s_options& o, int period, int failures) {
  return ojson{{"httpGet", {{"path", "/health"}, {"port", o.port}}},
               {"periodSeconds", period},
               {"timeoutSeconds", 5},
               {"failureThreshold", failures}};
}

ojson pod_spec(const plan_options& l, const k8s_options& o, bool leader, const std::string& script,
               int64_t memory_gib) {
  const std::string gpus = std::to_string(l.gpus_per_node);
  ojson container{{"name", leader ? "moxi" : "mpi-worker"},
                  {"image", o.image},
                  {"imagePullPolicy", "IfNotPresent"},
                  {"command", {"/bin/bash", "-c", script}}};
  if (leader)
    container["ports"] = {{{"name", "http"}, {"containerPort", o.port}, {"protocol", "TCP"}},
                          {{"name", "ssh"}, {"containerPort", 22}, {"protocol", "TCP"}}};
  else
    container["ports"] = {{{"name", "ssh"}, {"containerPort", 22}, {"protocol", "TCP"}}};
  const ojson quantities{{o.gpu_resource, gpus}, {"memory", std::to_string(memory_gib) + "Gi"}};
  container["resources"] = {{"requests", quantities}, {"limits", quantities}};
  if (leader) {
    // Startup: the weights load first (the whole group's ranks read theirs in parallel); then /health
    // answers 200, and 503 while shutting down (docs/serving.md).
    ojson startup = http_probe(o, 10, std::max(1, o.startup_minutes * 6));
    container["startupProbe"] = startup;
    container["readinessProbe"] = http_probe(o, 10, 3);
    container["livenessProbe"] = http_probe(o, 15, 4);
  } else {
    const ojson ssh{{"tcpSocket", {{"port", 22}}}, {"periodSeconds", 15}, {"timeoutSeconds", 5},
                    {"failureThreshold", 4}};
    container["readinessProbe"] = ssh;
    container["livenessProbe"] = ssh;
  }
  container["volumeMounts"] = {{{"name", "model"}, {"mountPath", "/models"}, {"readOnly", true}},
                               {{"name", "ssh"}, {"mountPath", "/etc/moxi-ssh"}, {"readOnly", true}},
                               {{"name", "dshm"}, {"mountPath", "/dev/shm"}}};
  ojson model{{"name", "model"}};
  if (!o.model_pvc.empty())
    model["persistentVolumeClaim"] = {{"claimName", o.model_pvc}, {"readOnly", true}};
  else
    model["hostPath"] = {{"path", o.model_host_path}, {"type", "Directory"}};
  const std::string secret = o.ssh_secret.empty() ? o.name + "-ssh" : o.ssh_secret;
  return ojson{{"restartPolicy", "Always"},
               {"terminationGracePeriodSeconds", 60},
               {"containers", {container}},
               {"volumes",
                {model,
                 {{"name", "ssh"}, {"secret", {{"secretName", secret}, {"defaultMode", 0400}}}},
                 {{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}}}}}}};
}

ojson pod_template(const plan_options& l, const k8s_options& o, bool leader, const std::string& script,
                   int64_t memory_gib) {
  ojson meta{{"labels", labels(o, leader ? "leader" : "worker")}};
  if (leader)  // only the leader serves HTTP, /metrics included
    meta["annotations"] = {{"prometheus.io/scrape", "true"},
                           {"prometheus.io/port", std::to_string(o.port)},
                           {"prometheus.io/path", "/metrics"}};
  return ojson{{"metadata", meta}, {"spec", pod_spec(l, o, leader, script, memory_gib)}};
}

ojson api_service(const k8s_options& o) {
  return ojson{{"apiVersion", "v1"},
               {"kind", "Service"},
               {"metadata", metadata(o, o.name + "-api", "api")},
               {"spec",
                {{"type", "ClusterIP"},
                 {"selector", {{"app.kubernetes.io/instance", o.name}, {"app.kubernetes.io/component", "leader"}}},
                 {"ports", {{{"name", "http"}, {"port", o.port}, {"targetPort", "http"}, {"protocol", "TCP"}}}}}}};
}

ojson alert(const std::string& name, const std::string& expr, const std::string& for_, const char* severity,
            const std::string& summary) {
  return ojson{{"alert", name},
               {"expr", expr},
               {"for", for_},
               {"labels", {{"severity", severity}}},
               {"annotations", {{"summary", summary}}}};
}

}  // namespace

int64_t k8s_pod_memory_gib(const plan_result& r, const plan_options& l) {
  uint64_t pod = 0;
  const size_t g = size_t(l.gpus_per_node);
  if (!r.load_bytes_per_rank.empty()) {
    for (size_t first = 0; first < r.load_bytes_per_rank.size(); first += g) {
      uint64_t sum = 0;
      for (size_t i = first; i < std::min(first + g, r.load_bytes_per_rank.size()); ++i) sum += r.load_bytes_per_rank[i];
      pod = std::max(pod, sum);
    }
  } else {
    pod = r.load_bytes_max * g;
  }
  return int64_t(std::ceil(double(pod) / double(uint64_t(1) << 30))) + 16;
}

std::string to_yaml(const ojson& doc) {
  std::string out;
  emit(out, doc, 0);
  return out;
}

std::string to_yaml_stream(const std::vector<ojson>& docs) {
  std::string out;
  for (const auto& d : docs) out += "---\n" + to_yaml(d);
  return out;
}

k8s_manifests make_k8s_manifests(const formats::model_config& config, const plan_result& plan,
                                 const plan_options& l, const k8s_options& o) {
  check_label("name", o.name, 40);  // leaves room for "-worker-<ordinal>" within a 63-character host name
  check_label("namespace", o.ns, 63);
  if (o.image.empty()) throw usage_error("plan: --image must not be empty");
  if (o.replicas < 0) throw usage_error("plan: --replicas must be >= 0");
  if (o.model_pvc.empty() == o.model_host_path.empty())
    throw usage_error("plan: --emit k8s needs the model volume: exactly one of --model-pvc NAME and --model-host-path DIR");
  if (!o.model_pvc.empty()) check_label("model-pvc", o.model_pvc, 253);
  if (!o.model_host_path.empty() && o.model_host_path.front() != '/')
    throw usage_error("plan: --model-host-path must be an absolute path");
  if (!o.model_path.starts_with("/models/") || o.model_path.find("..") != std::string::npos)
    throw usage_error("plan: --model-path must name a directory under /models/ (the model volume's mount)");
  if (!o.ssh_secret.empty()) check_label("ssh-secret", o.ssh_secret, 253);
  if (o.port < 1 || o.port > 65535 || o.port == 22) throw usage_error("plan: --port must be 1-65535 and not 22");
  if (!plan.fits) throw error("plan: the layout does not fit --device-memory; no manifests for it");

  group_shape g;
  g.pods = l.nodes;
  g.ranks_per_pod = l.gpus_per_node;
  g.world = plan.world_size;
  const int64_t memory = o.pod_memory_gib > 0 ? int64_t(std::ceil(o.pod_memory_gib)) : k8s_pod_memory_gib(plan, l);
  const std::string slots = std::to_string(g.ranks_per_pod), workers_n = std::to_string(g.pods - 1);
  const std::string model = config.source;
  k8s_manifests m;

  // LeaderWorkerSet: pods NAME-<group> (leader) and NAME-<group>-<i>, i = 1..size-1, under LWS' headless
  // Service NAME (subdomain policy Shared); RecreateGroupOnPodRestart restarts the whole group when any of
  // its pods or containers restarts.
  {
    const std::string workers = "for i in $(seq 1 " + workers_n + "); do hosts=\"$hosts,$(hostname)-$i." + o.name +
                                "." + o.ns + ":" + slots + "\"; done\n";
    ojson lws{{"apiVersion", "leaderworkerset.x-k8s.io/v1"},
              {"kind", "LeaderWorkerSet"},
              {"metadata", metadata(o, o.name, "group")},
              {"spec",
               {{"replicas", o.replicas},
                {"startupPolicy", "LeaderCreated"},
                {"rolloutStrategy",
                 {{"type", "RollingUpdate"},
                  {"rollingUpdateConfiguration", {{"maxUnavailable", 1}, {"maxSurge", 0}}}}},
                {"leaderWorkerTemplate",
                 {{"size", g.pods},
                  {"restartPolicy", "RecreateGroupOnPodRestart"},
                  {"leaderTemplate", pod_template(l, o, true, leader_script(l, o, g, workers), memory)},
                  {"workerTemplate", pod_template(l, o, false, worker_script(), memory)}}}}}};
    m.lws_objects = {lws, api_service(o)};
  }

  // StatefulSets: leaders NAME-leader-<group>, workers NAME-worker-<group * (size - 1) + i - 1>, both under
  // the headless Service NAME-mpi (publishNotReadyAddresses: mpirun needs the names before readiness).
  {
    const std::string mpi = o.name + "-mpi";
    const std::string workers = "g=${HOSTNAME##*-}\nfor i in $(seq 1 " + workers_n + "); do hosts=\"$hosts," +
                                o.name + "-worker-$((g * " + workers_n + " + i - 1))." + mpi + "." + o.ns + ":" +
                                slots + "\"; done\n";
    ojson headless{{"apiVersion", "v1"},
                   {"kind", "Service"},
                   {"metadata", metadata(o, mpi, "mpi")},
                   {"spec",
                    {{"clusterIP", "None"},
                     {"publishNotReadyAddresses", true},
                     {"selector", {{"app.kubernetes.io/instance", o.name}}},
                     {"ports", {{{"name", "ssh"}, {"port", 22}, {"targetPort", 22}, {"protocol", "TCP"}}}}}}};
    auto sts = [&](const std::string& name, const char* component, int replicas, ojson tmpl) {
      return ojson{{"apiVersion", "apps/v1"},
                   {"kind", "StatefulSet"},
                   {"metadata", metadata(o, name, component)},
                   {"spec",
                    {{"serviceName", mpi},
                     {"replicas", replicas},
                     {"podManagementPolicy", "Parallel"},
                     {"selector",
                      {{"matchLabels",
                        {{"app.kubernetes.io/instance", o.name}, {"app.kubernetes.io/component", component}}}}},
                     {"template", std::move(tmpl)}}}};
    };
    m.statefulset_objects = {
        headless,
        sts(o.name + "-leader", "leader", o.replicas, pod_template(l, o, true, leader_script(l, o, g, workers), memory)),
        sts(o.name + "-worker", "worker", o.replicas * (g.pods - 1), pod_template(l, o, false, worker_script(), memory)),
        api_service(o)};
  }

  // Alerts over serve/metrics.cpp's names; `up`, `namespace` and `pod` come from the usual kubernetes-pods
  // scrape job (prometheus.io annotations), kube_pod_status_ready from kube-state-metrics.
  {
    const std::string sel = "namespace=\"" + o.ns + "\",pod=~\"" + o.name + "-.*\"";
    ojson rules = ojson::array();
    rules.push_back(alert("MoxiServerDown", "up{" + sel + "} == 0", "2m", "critical",
                          "moxi group leader {{ $labels.pod }} is not answering /metrics: its MPI world is down "
                          "(a rank died, or it is restarting)"));
    rules.push_back(alert("MoxiRankNotReady", "kube_pod_status_ready{" + sel + ",condition=\"true\"} == 0", "5m",
                          "critical",
                          "moxi pod {{ $labels.pod }} is not ready (/health not 200 on a leader, sshd down on a "
                          "worker): its group cannot serve"));
    rules.push_back(alert("MoxiNoServingGroup", "absent(moxi:num_requests_running{" + sel + "})", "10m", "critical",
                          "no moxi group of " + o.name + " reports metrics"));
    rules.push_back(alert("MoxiQueueGrowing",
                          "moxi:num_requests_waiting{" + sel + "} > 8 and deriv(moxi:num_requests_waiting{" + sel +
                              "}[10m]) > 0",
                          "10m", "warning",
                          "requests waiting on {{ $labels.pod }} keep growing ({{ $value }}): add groups "
                          "(--replicas) or lower the load"));
    rules.push_back(alert("MoxiQueueTimeHigh",
                          "histogram_quantile(0.9, sum by (le, pod) (rate(moxi:request_queue_time_seconds_bucket{" +
                              sel + "}[5m]))) > 30",
                          "10m", "warning", "90 % of requests on {{ $labels.pod }} wait over 30 s for admission"));
    rules.push_back(alert("MoxiCacheFull", "moxi:kv_cache_usage_perc{" + sel + "} > 0.95", "5m", "warning",
                          "the cache of {{ $labels.pod }} is over 95 % full"));
    rules.push_back(alert("MoxiPreempting", "rate(moxi:num_preemptions_total{" + sel + "}[5m]) > 0", "10m",
                          "warning", "{{ $labels.pod }} preempts requests for lack of cache memory"));
    rules.push_back(alert("MoxiErrorRate",
                          "sum by (pod) (rate(moxi:request_success_total{" + sel +
                              ",finished_reason=\"error\"}[5m])) / sum by (pod) (rate(moxi:request_success_total{" +
                              sel + "}[5m])) > 0.05",
                          "5m", "warning", "over 5 % of the requests finished by {{ $labels.pod }} end in an error"));
    rules.push_back(alert("MoxiHttp5xx",
                          "sum by (pod) (rate(moxi:http_errors_total{" + sel +
                              ",status=~\"5..\"}[5m])) / sum by (pod) (rate(moxi:requests_received_total{" + sel +
                              "}[5m])) > 0.05",
                          "5m", "warning", "{{ $labels.pod }} answers over 5 % of the requests with a 5xx status"));
    ojson rule{{"apiVersion", "monitoring.coreos.com/v1"},
               {"kind", "PrometheusRule"},
               {"metadata", metadata(o, o.name + "-alerts", "alerts")},
               {"spec", {{"groups", {{{"name", "moxi-" + o.name}, {"rules", rules}}}}}}};
    m.alert_objects = {rule};
  }
  const std::string head = "# moxi plan --emit k8s: " + model + ", tp " + std::to_string(l.tp) + " x pp " +
                           std::to_string(l.pp) + " x dp " + std::to_string(plan.dp) + ", ep " + std::to_string(l.ep) +
                           "; " + std::to_string(g.pods) + " pods x " + slots + " GPUs per group, " +
                           std::to_string(o.replicas) + " group(s) (docs/deploy.md)\n";
  m.lws = head + to_yaml_stream(m.lws_objects);
  m.statefulset = head + to_yaml_stream(m.statefulset_objects);
  m.alerts = head + to_yaml_stream(m.alert_objects);
  return m;
}

}  // namespace moxi::model
