#include "actor/internal/engine.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

#include "actor/internal/prefill.h"
#include "actor/internal/row_key.h"
#include "actor/sampling.h"
#include "model/kv_cache_rows.h"
#include "model/routing_record.h"

namespace trellis::actor::internal {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Indices and masks are made on the host (the model and model/kv_cache_rows.h
// move them to the cache's device).
torch::Tensor LongTensor(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64);
}

class Decoder {
 public:
  Decoder(model::Decoder& model, const v1::GenerateRequest& request, int32_t pad_id,
          const EngineOptions& options, const EngineCallbacks& callbacks, TurnCache* turns,
          EngineResult* result)
      : model_(model),
        request_(request),
        pad_id_(pad_id),
        options_(options),
        callbacks_(callbacks),
        turns_(turns),
        result_(result),
        n_(std::max(1, request.responses_per_prompt())),
        max_new_(request.sampling().max_new_tokens()) {
    const std::vector<uint64_t> occurrences = Occurrences(request.prompts());
    const int64_t rows = request.prompts_size() * n_;
    result_->rows.resize(rows);
    unfinished_.assign(request.prompts_size(), n_);
    // A resumed row prefills its prompt and its tokens so far: its own
    // sequence (deque: the pointers below stay valid as it grows).
    std::deque<google::protobuf::RepeatedField<int32_t>> resumed;
    std::vector<const google::protobuf::RepeatedField<int32_t>*> sequences;
    std::vector<int64_t> done_at_start;
    int64_t shared = -1;  // the prefill row of the current prompt's own tokens
    for (int64_t r = 0; r < rows; ++r) {
      const v1::Prompt& prompt = request.prompts(r / n_);
      const bool resumes = prompt.resume_size() > 0;
      if (r % n_ == 0) shared = -1;
      keys_.push_back({resumes ? prompt.resume_seed() : request.seed(), prompt.id(),
                       occurrences[r / n_], static_cast<uint64_t>(r % n_)});
      source_.push_back(static_cast<int64_t>(sequences.size()));
      if (resumes && Resume(prompt.resume(r % n_), r)) {
        if (--unfinished_[r / n_] == 0) done_at_start.push_back(r / n_);
        source_.back() = -1;
        continue;
      }
      waiting_.push_back(r);
      if (!result_->rows[r].tokens.empty()) {
        resumed.emplace_back(prompt.token_ids());
        resumed.back().Add(result_->rows[r].tokens.begin(), result_->rows[r].tokens.end());
        sequences.push_back(&resumed.back());
      } else if (options.share_prefix && shared >= 0) {
        source_.back() = shared;  // the prompt's prefill, shared by its rows
      } else {
        shared = source_.back();
        sequences.push_back(&prompt.token_ids());
      }
    }
    prefill_ = RunPrefill(model, sequences, pad_id, turns, options.record_routing, result_);
    result_->peak_cache_bytes = prefill_.cache.bytes() + TurnBytes();
    finished_prompts_ = static_cast<int64_t>(done_at_start.size());
    if (callbacks_.group_done) {
      for (int64_t prompt : done_at_start) callbacks_.group_done(prompt, result_->rows);
    }
  }

  absl::Status Run() {
    const int64_t finish = request_.finish_prompts();
    while (true) {
      if (finish > 0 && finished_prompts_ >= finish) {
        for (EngineRow& row : result_->rows) row.unfinished = !row.ended && !Full(row);
        return absl::OkStatus();
      }
      Admit();
      if (batch_.empty()) return absl::OkStatus();
      if (callbacks_.stopped) {
        if (absl::Status s = callbacks_.stopped(result_->decode.forwards + 1); !s.ok()) return s;
      }
      std::vector<int64_t> fed, positions;
      for (int64_t r : batch_) {
        const EngineRow& row = result_->rows[r];
        fed.push_back(row.ended ? pad_id_ : row.tokens.back());
        positions.push_back(Extent(r));
      }
      const int64_t batch = static_cast<int64_t>(batch_.size());
      key_valid_ = torch::cat({key_valid_, torch::ones({batch, 1}, torch::kBool)}, 1);
      model::ExpertRouting routing;
      torch::Tensor logits =
          model_
              .forward(LongTensor(fed).unsqueeze(1), LongTensor(positions).unsqueeze(1),
                       key_valid_, &cache_, options_.record_routing ? &routing : nullptr)
              .select(1, 0);
      if (options_.record_routing) Record(routing.chosen);
      ++result_->decode.forwards;
      result_->decode.positions += batch;
      result_->decode.attention_pairs += batch * cache_.length;
      result_->largest_decode_batch = std::max(result_->largest_decode_batch, batch);
      std::vector<int64_t> at(batch);
      for (int64_t i = 0; i < batch; ++i) at[i] = i;
      Sample(logits, batch_, cache_, at);
    }
  }

 private:
  // Appends each fed row's experts (chosen: [batch, 1, layers, top_k]) to
  // its record; a finished row fed padding has none.
  void Record(const torch::Tensor& chosen) {
    const torch::Tensor host = chosen.to(torch::kCPU);
    for (size_t i = 0; i < batch_.size(); ++i) {
      if (!Done(batch_[i])) model::AppendRouting(host[i], &result_->rows[batch_[i]].routing);
    }
  }

  // The row's positions held in a cache: its prompt and every token fed.
  int64_t Extent(int64_t r) const {
    return request_.prompts(r / n_).token_ids_size() +
           static_cast<int64_t>(result_->rows[r].tokens.size()) - 1;
  }

  bool Full(const EngineRow& row) const {
    return static_cast<int64_t>(row.tokens.size()) == max_new_;
  }
  bool Done(int64_t r) const { return result_->rows[r].ended || Full(result_->rows[r]); }

  // Row r as `resumed` left it (its tokens, log-probs and end); true when
  // it had already finished, so it takes no further part.
  bool Resume(const v1::Sample& resumed, int64_t r) {
    EngineRow& row = result_->rows[r];
    row.tokens.assign(resumed.response_tokens().begin(), resumed.response_tokens().end());
    row.logprobs.assign(resumed.logprobs().begin(), resumed.logprobs().end());
    row.stop_index = resumed.stop_index();
    row.ended = !resumed.unfinished() && !resumed.truncated();
    return !resumed.unfinished();
  }

  // 1 + the index of the first stop sequence `tokens` end with; 0 if none.
  int32_t StopIndex(const std::vector<int32_t>& tokens) const {
    const auto& stops = request_.sampling().stop();
    for (int i = 0; i < stops.size(); ++i) {
      const auto& ids = stops[i].token_ids();
      if (ids.empty() || static_cast<size_t>(ids.size()) > tokens.size()) continue;
      if (std::equal(ids.begin(), ids.end(), tokens.end() - ids.size())) return i + 1;
    }
    return 0;
  }

  // Samples the next token of each unfinished row of `rows` from `logits`;
  // row rows[i]'s positions are those of row cache_rows[i] of `cache`. A
  // row that ends on a stop sequence (the turn a multi-turn caller goes on
  // with) leaves its sequence and cache in the turn cache.
  void Sample(const torch::Tensor& logits, const std::vector<int64_t>& rows,
              const model::KVCache& cache, const std::vector<int64_t>& cache_rows) {
    std::vector<double> uniforms;
    for (int64_t r : rows) {
      uniforms.push_back(
          RowUniform(keys_[r], static_cast<int64_t>(result_->rows[r].tokens.size())));
    }
    const SampledTokens s = SampleNext(logits, request_.sampling(), torch::tensor(uniforms));
    const torch::Tensor tokens = s.tokens.to(torch::kCPU);
    const torch::Tensor logprobs = s.logprobs.to(torch::kCPU);
    const int64_t* tok = tokens.data_ptr<int64_t>();
    const float* lp = logprobs.data_ptr<float>();
    std::vector<int64_t> done;  // prompts whose last row ended here
    for (size_t i = 0; i < rows.size(); ++i) {
      EngineRow& row = result_->rows[rows[i]];
      if (Done(rows[i])) continue;
      row.tokens.push_back(static_cast<int32_t>(tok[i]));
      row.logprobs.push_back(lp[i]);
      // Below the prompt's minimum length nothing ends the row (its
      // end-of-sequence draws stay in its tokens, as sampled).
      const bool may_end =
          static_cast<int64_t>(row.tokens.size()) >= request_.prompts(rows[i] / n_).min_new_tokens();
      row.stop_index = may_end ? StopIndex(row.tokens) : 0;
      row.ended = may_end && (row.stop_index > 0 || callbacks_.is_eos(row.tokens.back()));
      ++result_->generated_tokens;
      if (turns_ != nullptr && row.stop_index > 0) {
        turns_->Put(Sequence(rows[i]), cache, cache_rows[i]);
      }
      if (Done(rows[i]) && --unfinished_[rows[i] / n_] == 0) done.push_back(rows[i] / n_);
    }
    finished_prompts_ += static_cast<int64_t>(done.size());
    if (!callbacks_.group_done) return;
    std::sort(done.begin(), done.end());
    for (int64_t prompt : done) callbacks_.group_done(prompt, result_->rows);
  }

  // What row r's cache holds: its prompt and every token fed.
  std::vector<int32_t> Sequence(int64_t r) const {
    const auto& prompt = request_.prompts(r / n_).token_ids();
    const std::vector<int32_t>& tokens = result_->rows[r].tokens;
    std::vector<int32_t> sequence(prompt.begin(), prompt.end());
    sequence.insert(sequence.end(), tokens.begin(), tokens.end() - 1);
    return sequence;
  }

  // Samples the first token of waiting rows (from their prompt's prefill)
  // and moves those that go on into the decode batch. Without continuous
  // batching every row joins at once and the batch stays until all have
  // ended; with it, finished rows leave and waiting rows join within the
  // budget.
  void Admit() {
    if (!options_.continuous_batching) {
      if (!waiting_.empty()) Rebuild({}, Start(waiting_.size()));
      ReleasePrefill();
      if (std::all_of(batch_.begin(), batch_.end(), [this](int64_t r) { return Done(r); })) {
        batch_.clear();
      }
      return;
    }
    std::vector<int64_t> keep;  // positions in the batch
    for (size_t i = 0; i < batch_.size(); ++i) {
      if (!Done(batch_[i])) keep.push_back(static_cast<int64_t>(i));
    }
    const size_t budget =
        options_.decode_token_budget > 0 ? options_.decode_token_budget : SIZE_MAX;
    std::vector<int64_t> joining;
    while (!waiting_.empty() && keep.size() + joining.size() < budget) {
      for (int64_t r : Start(budget - keep.size() - joining.size())) {
        if (!Done(r)) joining.push_back(r);
      }
    }
    if (keep.size() != batch_.size() || !joining.empty()) Rebuild(keep, joining);
    ReleasePrefill();
  }

  // Once no row will join again, the prompts' cache is done with.
  void ReleasePrefill() {
    if (waiting_.empty()) prefill_.cache = model::KVCache();
  }

  // Takes up to `count` waiting rows and samples their first token.
  std::vector<int64_t> Start(size_t count) {
    std::vector<int64_t> rows, sources;
    while (!waiting_.empty() && rows.size() < count) {
      rows.push_back(waiting_.front());
      sources.push_back(source_[waiting_.front()]);
      if (options_.record_routing) {
        result_->rows[rows.back()].routing = prefill_.routing[sources.back()];
      }
      waiting_.pop_front();
    }
    Sample(prefill_.logits.index_select(0, LongTensor(sources).to(prefill_.logits.device())), rows,
           prefill_.cache, sources);
    return rows;
  }

  // The decode batch of the rows at positions `kept_at` of the batch now,
  // then the rows `joining` (from their prompt's prefill), right-aligned to
  // the longest row.
  void Rebuild(const std::vector<int64_t>& kept_at, const std::vector<int64_t>& joining) {
    int64_t columns = 1;
    std::vector<int64_t> keep, sources;
    for (int64_t i : kept_at) keep.push_back(batch_[i]);
    for (int64_t r : keep) columns = std::max(columns, Extent(r));
    for (int64_t r : joining) {
      columns = std::max(columns, Extent(r));
      sources.push_back(source_[r]);
    }
    if (joining.empty() && !keep.empty()) {
      // Rows only leave: drop them where they are.
      const torch::Tensor at = LongTensor(kept_at);
      cache_ = model::SelectRows(cache_, at);
      key_valid_ = key_valid_.index_select(0, at);
      batch_ = keep;
      return;
    }
    const int64_t capacity = columns + max_new_;
    std::vector<model::KVCache> parts;
    std::vector<torch::Tensor> valid;
    if (!kept_at.empty()) {
      parts.push_back(model::TakeRows(cache_, LongTensor(kept_at), columns, capacity));
      valid.push_back(model::TakeRightAligned(key_valid_, LongTensor(kept_at), 1, cache_.length,
                                              columns, columns));
    }
    if (!joining.empty()) {
      parts.push_back(model::TakeRows(prefill_.cache, LongTensor(sources), columns, capacity));
      valid.push_back(model::TakeRightAligned(prefill_.key_valid, LongTensor(sources), 1,
                                              prefill_.cache.length, columns, columns));
    }
    cache_ = parts.empty()       ? model::KVCache()
             : parts.size() == 1 ? std::move(parts[0])
                                 : model::ConcatRows(parts[0], parts[1]);
    key_valid_ = valid.empty() ? torch::Tensor() : torch::cat(valid, 0);
    batch_ = keep;
    batch_.insert(batch_.end(), joining.begin(), joining.end());
    result_->peak_cache_bytes =
        std::max(result_->peak_cache_bytes, prefill_.cache.bytes() + cache_.bytes() + TurnBytes());
  }

  // What the turn cache holds now (its entries are copies).
  int64_t TurnBytes() const { return turns_ != nullptr ? turns_->bytes() : 0; }

  model::Decoder& model_;
  const v1::GenerateRequest& request_;
  const int32_t pad_id_;
  const EngineOptions& options_;
  const EngineCallbacks& callbacks_;
  TurnCache* const turns_;
  EngineResult* result_;
  const int64_t n_;
  const int64_t max_new_;
  std::vector<RowKey> keys_;
  std::vector<int64_t> source_;  // the prefill row of each row (-1: resumed finished)
  std::deque<int64_t> waiting_;
  std::vector<int64_t> unfinished_;  // rows not yet done, per prompt
  int64_t finished_prompts_ = 0;     // prompts whose every row is done
  Prefill prefill_;
  std::vector<int64_t> batch_;  // rows in the decode batch, in cache order
  model::KVCache cache_;
  torch::Tensor key_valid_;  // [batch, cache length]
};

}  // namespace

absl::StatusOr<EngineResult> RunEngine(model::Decoder& model,
                                       const v1::GenerateRequest& request, int32_t pad_id,
                                       const EngineOptions& options,
                                       const EngineCallbacks& callbacks, TurnCache* turns) {
  EngineResult result;
  if (request.prompts_size() == 0) return result;
  const auto start = std::chrono::steady_clock::now();
  Decoder decoder(model, request, pad_id, options, callbacks, turns, &result);
  result.prefill.seconds = SecondsSince(start);
  if (absl::Status s = decoder.Run(); !s.ok()) return s;
  result.decode.seconds = SecondsSince(start) - result.prefill.seconds;
  return result;
}

absl::StatusOr<EngineResult> RunEngine(model::TransformerImpl& model,
                                       const v1::GenerateRequest& request, int32_t pad_id,
                                       const EngineOptions& options,
                                       const EngineCallbacks& callbacks, TurnCache* turns) {
  model::TransformerDecoder decoder(model);
  return RunEngine(decoder, request, pad_id, options, callbacks, turns);
}

}  // namespace trellis::actor::internal
