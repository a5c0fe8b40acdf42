// The cloud instance type table: what a hostfile's instance_type= means.
// accrun-hostfile(5) lists the same rows with their sources; keep them
// together.
//
// Sources, so the rows can be checked again: AWS's "Accelerated computing
// instances" page of the EC2 instance type guide (GPU model and count per
// size) and the AWS Neuron documentation's Trn1, Trn2, Inf1 and Inf2
// architecture pages (Neuron devices and NeuronCores per instance); Google
// Cloud's "GPU machine types" and "Accelerator-optimized machine family"
// pages, and the Cloud TPU / GKE TPU pages for the ct* machine types (chips
// per VM).  Ray's autoscaler uses the same facts for its AWS node types.
#include <algorithm>

#include "internal.hpp"

namespace accrun::detect {
namespace {

using namespace types;

// One family of sizes that differ only in their count.
struct Sizes {
  std::string_view cloud;
  std::string_view type;     // canonical accelerator type
  std::string_view resource;
  int per_chip;              // resource units per chip (NeuronCores per Neuron device), else 1
  std::vector<std::pair<std::string_view, int>> sizes;  // instance type → chips
};

const std::vector<Sizes>& families() {
  static const std::vector<Sizes> kFamilies = {
      // AWS, NVIDIA GPUs.
      {"aws", "V100", "GPU", 1, {{"p3.2xlarge", 1}, {"p3.8xlarge", 4}, {"p3.16xlarge", 8}, {"p3dn.24xlarge", 8}}},
      {"aws", kA100_40G, "GPU", 1, {{"p4d.24xlarge", 8}}},
      {"aws", kA100_80G, "GPU", 1, {{"p4de.24xlarge", 8}}},
      {"aws", kH100Sxm, "GPU", 1, {{"p5.48xlarge", 8}, {"p5.4xlarge", 1}}},
      {"aws", "H200-SXM", "GPU", 1, {{"p5e.48xlarge", 8}, {"p5en.48xlarge", 8}}},
      {"aws", kB200, "GPU", 1, {{"p6-b200.48xlarge", 8}}},
      {"aws", kT4, "GPU", 1,
       {{"g4dn.xlarge", 1}, {"g4dn.2xlarge", 1}, {"g4dn.4xlarge", 1}, {"g4dn.8xlarge", 1}, {"g4dn.16xlarge", 1},
        {"g4dn.12xlarge", 4}, {"g4dn.metal", 8}}},
      {"aws", kA10G, "GPU", 1,
       {{"g5.xlarge", 1}, {"g5.2xlarge", 1}, {"g5.4xlarge", 1}, {"g5.8xlarge", 1}, {"g5.16xlarge", 1},
        {"g5.12xlarge", 4}, {"g5.24xlarge", 4}, {"g5.48xlarge", 8}}},
      {"aws", kL4, "GPU", 1,
       {{"g6.xlarge", 1}, {"g6.2xlarge", 1}, {"g6.4xlarge", 1}, {"g6.8xlarge", 1}, {"g6.16xlarge", 1},
        {"g6.12xlarge", 4}, {"g6.24xlarge", 4}, {"g6.48xlarge", 8}}},
      {"aws", kL40S, "GPU", 1,
       {{"g6e.xlarge", 1}, {"g6e.2xlarge", 1}, {"g6e.4xlarge", 1}, {"g6e.8xlarge", 1}, {"g6e.16xlarge", 1},
        {"g6e.12xlarge", 4}, {"g6e.24xlarge", 4}, {"g6e.48xlarge", 8}}},
      // AWS, Gaudi and Neuron.  Trainium and Inferentia2 devices have 2
      // NeuronCores, Inferentia1 4; a Trainium2 device has 8 physical cores,
      // 4 logical ones under the runtime's default grouping (accrun(7)).
      {"aws", kGaudi, "HPU", 1, {{"dl1.24xlarge", 8}}},
      {"aws", kTrainium1, "neuron_cores", 2, {{"trn1.2xlarge", 1}, {"trn1.32xlarge", 16}, {"trn1n.32xlarge", 16}}},
      {"aws", kTrainium2, "neuron_cores", 4, {{"trn2.48xlarge", 16}}},
      {"aws", "INFERENTIA1", "neuron_cores", 4,
       {{"inf1.xlarge", 1}, {"inf1.2xlarge", 1}, {"inf1.6xlarge", 4}, {"inf1.24xlarge", 16}}},
      {"aws", kInferentia2, "neuron_cores", 2,
       {{"inf2.xlarge", 1}, {"inf2.8xlarge", 1}, {"inf2.24xlarge", 6}, {"inf2.48xlarge", 12}}},
      // Google Cloud, NVIDIA GPUs.
      {"gcp", kA100_40G, "GPU", 1,
       {{"a2-highgpu-1g", 1}, {"a2-highgpu-2g", 2}, {"a2-highgpu-4g", 4}, {"a2-highgpu-8g", 8},
        {"a2-megagpu-16g", 16}}},
      {"gcp", kA100_80G, "GPU", 1,
       {{"a2-ultragpu-1g", 1}, {"a2-ultragpu-2g", 2}, {"a2-ultragpu-4g", 4}, {"a2-ultragpu-8g", 8}}},
      {"gcp", kH100Sxm, "GPU", 1,
       {{"a3-highgpu-1g", 1}, {"a3-highgpu-2g", 2}, {"a3-highgpu-4g", 4}, {"a3-highgpu-8g", 8},
        {"a3-megagpu-8g", 8}, {"a3-edgegpu-8g", 8}}},
      {"gcp", "H200-SXM", "GPU", 1, {{"a3-ultragpu-8g", 8}}},
      {"gcp", kB200, "GPU", 1, {{"a4-highgpu-8g", 8}}},
      {"gcp", kL4, "GPU", 1,
       {{"g2-standard-4", 1}, {"g2-standard-8", 1}, {"g2-standard-12", 1}, {"g2-standard-16", 1},
        {"g2-standard-32", 1}, {"g2-standard-24", 2}, {"g2-standard-48", 4}, {"g2-standard-96", 8}}},
      // Google Cloud TPU VMs: chips per VM.
      {"gcp", kTpuV4, "TPU", 1, {{"ct4p-hightpu-4t", 4}}},
      {"gcp", kTpuV5LitePod, "TPU", 1, {{"ct5lp-hightpu-1t", 1}, {"ct5lp-hightpu-4t", 4}, {"ct5lp-hightpu-8t", 8}}},
      {"gcp", kTpuV5P, "TPU", 1, {{"ct5p-hightpu-4t", 4}}},
      {"gcp", kTpuV6E, "TPU", 1, {{"ct6e-standard-1t", 1}, {"ct6e-standard-4t", 4}, {"ct6e-standard-8t", 8}}},
  };
  return kFamilies;
}

}  // namespace

const std::vector<InstanceType>& instance_types() {
  static const std::vector<InstanceType> kTypes = [] {
    std::vector<InstanceType> out;
    for (const Sizes& f : families()) {
      for (const auto& [name, chips] : f.sizes) {
        out.push_back(InstanceType{std::string(name), std::string(f.cloud), std::string(f.resource),
                                   chips * f.per_chip, chips, std::string(f.type)});
      }
    }
    return out;
  }();
  return kTypes;
}

const InstanceType* find_instance_type(std::string_view name) {
  const std::string n = internal::lower(internal::trim(name));
  const auto& all = instance_types();
  auto it = std::find_if(all.begin(), all.end(), [&](const InstanceType& t) { return t.name == n; });
  return it == all.end() ? nullptr : &*it;
}

}  // namespace accrun::detect
