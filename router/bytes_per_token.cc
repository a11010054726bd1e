#include "router/bytes_per_token.h"

#include <algorithm>

#include "absl/strings/string_view.h"

namespace kvroute::router {

BytesPerTokenModel::BytesPerTokenModel(double initial, double alpha, size_t max_models)
    : initial_(std::clamp(initial, kMinRatio, kMaxRatio)),
      alpha_(std::clamp(alpha, 1e-4, 1.0)),
      max_models_(max_models),
      fleet_{initial_} {}

double BytesPerTokenModel::For(std::string_view model) const {
  auto it = models_.find(absl::string_view(model.data(), model.size()));
  return it == models_.end() ? fleet_.ratio : it->second.ratio;
}

void BytesPerTokenModel::Update(Estimate& e, double sample) const {
  ++e.samples;
  const double weight = std::max(alpha_, 1.0 / static_cast<double>(e.samples));
  e.ratio += weight * (sample - e.ratio);
}

void BytesPerTokenModel::Observe(std::string_view model, int64_t prompt_bytes,
                                 int64_t prompt_tokens) {
  if (prompt_bytes <= 0 || prompt_tokens <= 0) return;
  const double sample = static_cast<double>(prompt_bytes) / static_cast<double>(prompt_tokens);
  if (sample < kMinRatio || sample > kMaxRatio) return;
  Update(fleet_, sample);
  auto it = models_.find(absl::string_view(model.data(), model.size()));
  if (it == models_.end()) {
    if (models_.size() >= max_models_) return;
    it = models_.emplace(std::string(model), Estimate{initial_}).first;
  }
  Update(it->second, sample);
}

}  // namespace kvroute::router
