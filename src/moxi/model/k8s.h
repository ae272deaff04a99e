// Kubernetes manifests for a `moxi plan` layout (`moxi plan --emit k8s`, docs/deploy.md): one serving group
// is one MPI world of `nodes` pods (one per node, gpus_per_node ranks each); rank 0's pod (the leader) runs
// `mpirun` over the group's pods, found by the DNS names of a headless Service, and serves the HTTP API.
// Two variants: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, which recreates the whole group when one
// pod restarts) and, for clusters without LWS, two StatefulSets (leaders and workers) under one headless
// Service. Both come with a Service for the API; the alert rules are a PrometheusRule
// (monitoring.coreos.com/v1) over the metric names of serve/metrics.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/plan.h"

namespace moxi::model {

struct k8s_options {
  std::string name = "moxi";            // object names and the app.kubernetes.io/instance label
  std::string ns = "default";           // metadata.namespace
  std::string image = "moxi:latest";    // needs moxi, Open MPI (mpirun), an SSH server and client, curl
  int replicas = 1;                     // serving groups (each a whole MPI world)
  std::string model_path = "/models/seed-2.8t";  // the model directory inside the pod, under /models
  std::string model_pvc;                // the volume holding the weights: a PersistentVolumeClaim ...
  std::string model_host_path;          // ... or a directory on every node (exactly one of the two)
  std::string ssh_secret;               // Secret with authorized_keys, id_ed25519, config; "" = NAME-ssh
  std::string gpu_resource = "nvidia.com/gpu";
  int port = 8000;
  double pod_memory_gib = 0;            // host memory per pod; 0 = from the plan (see docs/deploy.md)
  int startup_minutes = 120;            // how long the startup probe waits for the weights to load
};

// One multi-document YAML text per file.
struct k8s_manifests {
  std::string lws;          // LeaderWorkerSet + API Service
  std::string statefulset;  // headless Service + leader and worker StatefulSets + API Service
  std::string alerts;       // PrometheusRule
  // The same objects as JSON, in the order they are written (for tests and --json-minded tools).
  std::vector<nlohmann::ordered_json> lws_objects, statefulset_objects, alert_objects;
};

// Throws moxi::error for options that cannot make a valid manifest (bad names, no model volume, ...).
k8s_manifests make_k8s_manifests(const formats::model_config& config, const plan_result& plan,
                                 const plan_options& layout, const k8s_options& options);

// Host memory requested per pod when k8s_options::pod_memory_gib is 0, in GiB (whole): the checkpoint
// bytes the pod's ranks read at load (they pass through host memory) plus 16 GiB for the runtime.
int64_t k8s_pod_memory_gib(const plan_result& plan, const plan_options& layout);

// Block-style YAML of one document (strings that could read as another type are double-quoted, multi-line
// strings become literal blocks); documents joined with "---" lines.
std::string to_yaml(const nlohmann::ordered_json& doc);
std::string to_yaml_stream(const std::vector<nlohmann::ordered_json>& docs);

}  // namespace moxi::model
