// Model loading: synthetic shapes and values, the Hugging Face writer -> loader round trip, the RoPE row
// permutation on real files, sharded checkpoints, config/tensor disagreements, load_model dispatch, llama3 RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "models/config.h"
#include "models/hf_config.h"
#include "models/hf_writer.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "models_test_util.h"

namespace {

using llm::DType;
using llm::HfWeight;
using llm::Model;
using llm_test::expect_error;
using llm_test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

json read_json(const fs::path& p) { return json::parse(llm_test::read_file(p)); }

std::vector<HfWeight> table_of(Model& m) { return llm::hf_weight_table(m.config, m.weights); }

int64_t param_count(Model& m) {
  int64_t n = 0;
  for (const HfWeight& w : table_of(m)) n += w.slot->numel();
  return n;
}

TEST(SyntheticModels, ExactShapesOfTheRealCheckpoints) {
  // Published parameter counts of the real models (Meta, TinyLlama, HuggingFaceTB model cards).
  const std::vector<std::pair<std::string, int64_t>> params = {{"llama3.1-8b", 8030261248},
                                                               {"llama3.1-70b", 70553706496},
                                                               {"llama2-7b", 6738415616},
                                                               {"tinyllama-1.1b", 1100048384},
                                                               {"smollm2-135m", 134515008}};
  for (const auto& [name, count] : params) {
    SCOPED_TRACE(name);
    Model m = llm::load_synthetic(name);
    EXPECT_EQ(param_count(m), count);
    EXPECT_EQ(m.format, "synthetic");
    EXPECT_EQ(m.source, "synthetic:" + name);
  }
  Model m = llm::load_synthetic("llama3.1-8b");
  const llm::ModelConfig& c = m.config;
  EXPECT_EQ(c.n_layers, 32);
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.hidden_dim, 14336);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(m.weights.layers.size(), 32u);
  EXPECT_EQ(m.weights.layers[31].wk.rows, 1024);
  EXPECT_EQ(m.weights.layers[31].wk.rope_head_dim, 128);
  EXPECT_EQ(m.weights.layers[31].wv.rope_head_dim, 0);
  EXPECT_EQ(m.weights.layers[0].w_down.cols, 14336);
  EXPECT_EQ(m.weights.head.fill.tensor_id, 3u);

  Model s = llm::load_synthetic("smollm2-135m");
  EXPECT_TRUE(s.config.tied_embeddings);
  EXPECT_EQ(s.config.head_dim, 64);
  EXPECT_EQ(s.weights.head.fill.tensor_id, 1u);  // the embedding itself

  Model hd = llm::load_synthetic("tiny-hd");
  EXPECT_EQ(hd.config.q_dim(), 96);
  EXPECT_EQ(hd.weights.layers[1].wo.rows, 48);
  EXPECT_EQ(hd.weights.layers[1].wo.cols, 96);
}

TEST(SyntheticModels, UnknownNameListsTheKnownOnes) {
  expect_error([] { llm::load_synthetic("llama9"); }, {"llama9", "llama3.1-8b", "tiny-gqa", "tiny-hd", "smollm2-135m"});
  EXPECT_EQ(llm::synthetic_model_names().size(), 9u);
}

// Engine row that reads file row fr (searching HostTensor::file_row, the definition under test elsewhere).
int64_t engine_row_of(const llm::HostTensor& t, int64_t fr) {
  for (int64_t r = 0; r < t.rows; ++r)
    if (t.file_row(r) == fr) return r;
  return -1;
}

TEST(SyntheticModels, ValuesMatchTheNumpyMirror) {
  // tests/data/synthetic_ref.json: tools/synthetic.py, an independent numpy implementation of the generator and spec.
  json ref = read_json(fs::path(LLM_SOURCE_DIR) / "tests/data/synthetic_ref.json");
  ASSERT_GE(ref["cases"].size(), 10u);
  for (const json& c : ref["cases"]) {
    const std::string name = c["name"];
    const uint64_t seed = c["seed"];
    const bool big = c["shape"][0] == 128256;
    SCOPED_TRACE(name + " seed " + std::to_string(seed));
    Model m = llm::load_synthetic(big ? "llama3.1-8b" : "tiny-gqa", seed);
    const llm::HostTensor* t = nullptr;
    for (const HfWeight& w : table_of(m))
      if (w.name == name) t = w.slot;
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->fill.tensor_id, c["tensor_id"].get<uint64_t>());
    EXPECT_EQ(t->fill.offset, c["offset"].get<float>());
    EXPECT_EQ(t->fill.scale, c["scale"].get<float>());
    std::vector<float> row(size_t(t->cols));
    for (size_t k = 0; k < c["index"].size(); ++k) {
      const int64_t idx = c["index"][k], fr = idx / t->cols, col = idx % t->cols;
      const int64_t r = engine_row_of(*t, fr);
      ASSERT_GE(r, 0);
      t->read_rows_f32(r, 1, row.data());
      EXPECT_EQ(llm::f32_to_bf16(row[size_t(col)]), c["bf16_bits"][k].get<uint16_t>()) << "element " << idx;
    }
  }
}

TEST(SyntheticModels, SeedChangesEveryTensorAndScalesAreAsSpecified) {
  Model a = llm::load_synthetic("tiny-gqa", 0), b = llm::load_synthetic("tiny-gqa", 1);
  auto ta = table_of(a), tb = table_of(b);
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    SCOPED_TRACE(ta[i].name);
    std::vector<float> va = ta[i].slot->to_f32(), vb = tb[i].slot->to_f32();
    EXPECT_NE(va, vb);
    double lo = 1e9, hi = -1e9;
    for (float v : va) lo = std::min(lo, double(v)), hi = std::max(hi, double(v));
    if (ta[i].kind == llm::WeightKind::Norm) {
      EXPECT_GE(lo, 0.79);
      EXPECT_LE(hi, 1.21);
    } else {
      const double s = ta[i].kind == llm::WeightKind::Embedding ? 1.0 : std::sqrt(3.0 / double(ta[i].cols));
      EXPECT_LE(std::max(-lo, hi), s * 1.004);  // BF16 rounding may overshoot by half an ulp
      EXPECT_GT(std::max(-lo, hi), s * 0.9);
    }
  }
}

// ---- writer -> loader ----------------------------------------------------------------------------------------

// The value a synthetic element has after being stored as `dt` (F16 loses bits only below 2^-16).
float stored(float v, DType dt) { return dt == DType::F16 ? llm::f16_to_f32(llm::f32_to_f16(v)) : v; }

void expect_same_model(Model& synthetic, Model& loaded, DType dt) {
  EXPECT_EQ(loaded.format, "hf");
  const llm::ModelConfig &a = synthetic.config, &b = loaded.config;
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_ids, b.eos_ids);
  EXPECT_EQ(llm::rope_inv_freq(a), llm::rope_inv_freq(b));

  auto ta = table_of(synthetic), tb = table_of(loaded);
  ASSERT_EQ(ta.size(), tb.size());
  ta.push_back({"head", &synthetic.weights.head, llm::WeightKind::Linear, 0, 0, 0, 0});
  tb.push_back({"head", &loaded.weights.head, llm::WeightKind::Linear, 0, 0, 0, 0});
  for (size_t i = 0; i < ta.size(); ++i) {
    SCOPED_TRACE(ta[i].name);
    const llm::HostTensor &s = *ta[i].slot, &l = *tb[i].slot;
    ASSERT_FALSE(l.synthetic);
    EXPECT_EQ(l.dtype, dt);
    EXPECT_EQ(l.rows, s.rows);
    EXPECT_EQ(l.cols, s.cols);
    EXPECT_EQ(l.rope_head_dim, s.rope_head_dim);
    std::vector<float> vs = s.to_f32(), vl = l.to_f32();
    ASSERT_EQ(vs.size(), vl.size());
    int64_t mismatches = 0, inexact = 0, inexact_large = 0;
    for (size_t k = 0; k < vs.size(); ++k) {
      const float want = stored(vs[k], dt);
      mismatches += std::memcmp(&vl[k], &want, 4) != 0;
      if (vl[k] != vs[k]) ++inexact, inexact_large += std::fabs(vs[k]) >= std::ldexp(1.0f, -16);
    }
    EXPECT_EQ(mismatches, 0);
    // Only F16, and only below 2^-16 (its subnormals), may lose bits of the BF16 values; all else is exact.
    EXPECT_EQ(inexact_large, 0);
    if (dt != DType::F16) {
      EXPECT_EQ(inexact, 0);
    }
  }
}

struct RoundTrip {
  const char* model;
  DType dtype;
  int shards;
  bool rope_parameters;
};

void PrintTo(const RoundTrip& p, std::ostream* os) {
  *os << p.model << " " << llm::dtype_name(p.dtype) << " shards=" << p.shards
      << (p.rope_parameters ? " rope_parameters" : "");
}

class HfRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(HfRoundTrip, LoadedTensorsEqualTheSyntheticOnes) {
  const RoundTrip& p = GetParam();
  TempDir tmp;
  Model m = llm::load_synthetic(p.model, 42);
  llm::HfWriteOptions opt;
  opt.dtype = p.dtype;
  opt.shards = p.shards;
  opt.rope_parameters = p.rope_parameters;
  llm::write_hf_model(m, tmp.str("hf"), opt);

  const fs::path dir = tmp.path() / "hf";
  if (p.shards == 1) {
    EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
    EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  } else {
    json index = read_json(dir / "model.safetensors.index.json");
    std::set<std::string> shards;
    for (auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
    EXPECT_EQ(shards.size(), size_t(p.shards));
    for (const auto& s : shards) EXPECT_TRUE(fs::exists(dir / s)) << s;
    EXPECT_EQ(index["weight_map"].size(), table_of(m).size());
  }
  json config = read_json(dir / "config.json");
  EXPECT_EQ(config.contains("rope_parameters"), p.rope_parameters);
  EXPECT_EQ(config["tie_word_embeddings"].get<bool>(), m.config.tied_embeddings);

  Model loaded = llm::load_hf_dir(dir.string());
  EXPECT_EQ(loaded.tokenizer_path, "");
  expect_same_model(m, loaded, p.dtype);
}

INSTANTIATE_TEST_SUITE_P(
    Synthetic, HfRoundTrip,
    ::testing::Values(RoundTrip{"tiny-gqa", DType::BF16, 1, false}, RoundTrip{"tiny-gqa", DType::F16, 3, false},
                      RoundTrip{"tiny-gqa", DType::F32, 1, true}, RoundTrip{"tiny-gqa", DType::BF16, 4, true},
                      RoundTrip{"tiny-hd", DType::BF16, 1, false}, RoundTrip{"tiny-hd", DType::F16, 1, true},
                      RoundTrip{"tiny-hd", DType::F32, 2, false}),
    [](const ::testing::TestParamInfo<RoundTrip>& i) {
      std::string n = std::string(i.param.model) + "_" + llm::dtype_name(i.param.dtype) + "_" +
                      std::to_string(i.param.shards) + "shard" + (i.param.rope_parameters ? "_ropeparams" : "");
      for (char& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(HfWriter, TiedModelHasNoLmHeadAndUntiedHasOne) {
  TempDir tmp;
  llm::write_hf_model(llm::load_synthetic("tiny-hd"), tmp.str("tied"));
  llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp.str("untied"));
  llm::SafetensorsFile tied = llm::open_safetensors(tmp.str("tied/model.safetensors"));
  llm::SafetensorsFile untied = llm::open_safetensors(tmp.str("untied/model.safetensors"));
  EXPECT_EQ(tied.find("lm_head.weight"), nullptr);
  ASSERT_NE(untied.find("lm_head.weight"), nullptr);
  EXPECT_EQ(untied.find("lm_head.weight")->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(tied.tensors.size(), 1u + 2u * 9u + 1u);
  // The safetensors convention: data starts 8-byte aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tied.find("model.norm.weight")->data) % 8, 0u);
  json config = read_json(tmp.path() / "untied/config.json");
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["rms_norm_eps"].get<double>(), 1e-05);
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(read_json(tmp.path() / "tied/config.json")["rope_scaling"], nullptr);

  // An untied config whose checkpoint lacks lm_head.weight: the head is the embedding.
  json c = read_json(tmp.path() / "tied/config.json");
  c["tie_word_embeddings"] = false;
  llm_test::write_file(tmp.path() / "tied/config.json", c.dump());
  Model m = llm::load_hf_dir(tmp.str("tied"));
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.weights.head.data, m.weights.embedding.data);
}

TEST(HfWriter, RefusesNonEmptyDirectoryUnlessOverwriting) {
  TempDir tmp;
  Model m = llm::load_synthetic("tiny-gqa");
  llm::HfWriteOptions opt;
  opt.shards = 3;
  llm::write_hf_model(m, tmp.str(), opt);
  expect_error([&] { llm::write_hf_model(m, tmp.str()); }, {tmp.str(), "not empty"});
  opt.shards = 1;
  opt.overwrite = true;
  llm::write_hf_model(m, tmp.str(), opt);
  EXPECT_FALSE(fs::exists(tmp.path() / "model.safetensors.index.json"));  // stale shards are gone
  EXPECT_FALSE(fs::exists(tmp.path() / "model-00001-of-00003.safetensors"));
  EXPECT_NO_THROW(llm::load_hf_dir(tmp.str()));
  opt.shards = 1000;
  expect_error([&] { llm::write_hf_model(m, tmp.str(), opt); }, {"shard count 1000"});
}

TEST(HfWriter, CopiesTheTokenizer) {
  TempDir tmp;
  llm_test::write_file(tmp.path() / "tok.model", "not really a sentencepiece model");
  llm::HfWriteOptions opt;
  opt.tokenizer = tmp.str("tok.model");
  llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp.str("hf"), opt);
  Model m = llm::load_hf_dir(tmp.str("hf"));
  EXPECT_EQ(m.tokenizer_path, tmp.str("hf/tokenizer.model"));
  EXPECT_EQ(llm_test::read_file(m.tokenizer_path), "not really a sentencepiece model");
  opt.tokenizer = tmp.str("missing.model");
  expect_error([&] { llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp.str("hf2"), opt); },
               {tmp.str("missing.model")});
}

// HF stores q/k rows rotate-half (pair i, i + hd/2); the engine reads them interleaved (2j, 2j+1).
TEST(HfLoader, RopeRowPermutationOnRealData) {
  TempDir tmp;
  llm::HfWriteOptions opt;
  opt.dtype = DType::F32;
  llm::write_hf_model(llm::load_synthetic("tiny-hd", 3), tmp.str(), opt);
  Model m = llm::load_hf_dir(tmp.str());
  llm::SafetensorsFile f = llm::open_safetensors(tmp.str("model.safetensors"));
  for (const char* which : {"q_proj", "k_proj"}) {
    SCOPED_TRACE(which);
    const std::string name = std::string("model.layers.1.self_attn.") + which + ".weight";
    const llm::SafetensorsTensor* st = f.find(name);
    ASSERT_NE(st, nullptr);
    const float* file = static_cast<const float*>(st->data);
    const llm::HostTensor& t = which[0] == 'q' ? m.weights.layers[1].wq : m.weights.layers[1].wk;
    std::vector<float> engine = t.to_f32();
    const int64_t hd = 24, cols = 48, heads = t.rows / hd;
    ASSERT_EQ(st->shape, (std::vector<int64_t>{t.rows, cols}));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < hd / 2; ++j)
        for (int64_t s = 0; s < 2; ++s)
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(engine[size_t((h * hd + 2 * j + s) * cols + c)], file[(h * hd + s * hd / 2 + j) * cols + c])
                << "head " << h << " pair " << j << " half " << s << " col " << c;
  }
  // v_proj is not permuted.
  const float* v = static_cast<const float*>(f.find("model.layers.0.self_attn.v_proj.weight")->data);
  std::vector<float> ev = m.weights.layers[0].wv.to_f32();
  EXPECT_EQ(std::memcmp(ev.data(), v, ev.size() * 4), 0);
}

TEST(HfLoader, ShardedIndexErrors) {
  TempDir tmp;
  llm::HfWriteOptions opt;
  opt.shards = 3;
  llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp.str(), opt);
  const fs::path index_path = tmp.path() / "model.safetensors.index.json";
  const json index = read_json(index_path);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  const std::string q_shard = index["weight_map"][q];

  // A tensor the index places in a shard that does not hold it.
  json wrong = index;
  const std::string other = q_shard == "model-00003-of-00003.safetensors" ? "model-00001-of-00003.safetensors"
                                                                          : "model-00003-of-00003.safetensors";
  wrong["weight_map"][q] = other;
  llm_test::write_file(index_path, wrong.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {q, other, "missing"});

  // A tensor the index does not list.
  json unlisted = index;
  unlisted["weight_map"].erase(q);
  llm_test::write_file(index_path, unlisted.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {q, "not listed", tmp.str()});

  // A shard that is not there.
  llm_test::write_file(index_path, index.dump());
  EXPECT_NO_THROW(llm::load_hf_dir(tmp.str()));
  fs::remove(tmp.path() / "model-00002-of-00003.safetensors");
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {"model-00002-of-00003.safetensors", "not found"});

  llm_test::write_file(index_path, "{\"weight_map\": 3}");
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {index_path.string(), "weight_map"});
}

TEST(HfLoader, ConfigThatDisagreesWithATensorNamesIt) {
  TempDir tmp;
  llm::write_hf_model(llm::load_synthetic("tiny-gqa"), tmp.str());
  const fs::path cp = tmp.path() / "config.json";
  const json good = read_json(cp);

  json c = good;
  c["intermediate_size"] = 128;
  llm_test::write_file(cp, c.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); },
               {"model.layers.0.mlp.gate_proj.weight", "expected shape [128, 64]", "found [160, 64]",
                tmp.str("model.safetensors")});

  c = good;
  c["num_key_value_heads"] = 4;
  llm_test::write_file(cp, c.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); },
               {"model.layers.0.self_attn.k_proj.weight", "expected shape [64, 64]", "found [32, 64]"});

  c = good;
  c["num_hidden_layers"] = 1;  // would silently drop layer 1
  llm_test::write_file(cp, c.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {"model.layers.1.", "num_hidden_layers"});

  c = good;
  c["num_hidden_layers"] = 3;
  llm_test::write_file(cp, c.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {"model.layers.2.input_layernorm.weight", "not found"});

  c = good;
  c["vocab_size"] = 300;
  llm_test::write_file(cp, c.dump());
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {"model.embed_tokens.weight", "[300, 64]", "[256, 64]"});
}

TEST(HfLoader, DirectoryErrors) {
  TempDir tmp;
  expect_error([&] { llm::load_hf_dir(tmp.str("nope")); }, {tmp.str("nope"), "not a directory"});
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {tmp.str(), "config.json"});
  llm_test::write_file(tmp.path() / "config.json", llm::hf_config_json(llm::load_synthetic("tiny-gqa").config,
                                                                        DType::BF16, false));
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {tmp.str(), "model.safetensors"});
  llm_test::write_file(tmp.path() / "model.safetensors", "");
  expect_error([&] { llm::load_hf_dir(tmp.str()); }, {tmp.str("model.safetensors"), "empty"});
}

TEST(LoadModel, DispatchesOnThePath) {
  Model s = llm::load_model("synthetic:tiny-gqa");
  EXPECT_EQ(s.format, "synthetic");
  EXPECT_EQ(s.config.dim, 64);
  expect_error([] { llm::load_model("synthetic:nope"); }, {"nope", "tiny-gqa"});
  expect_error([] { llm::load_model("/no/such/model.bin"); }, {"model path not found: /no/such/model.bin"});

  TempDir tmp;
  llm::write_hf_model(llm::load_synthetic("tiny-hd"), tmp.str());
  Model d = llm::load_model(tmp.str());
  EXPECT_EQ(d.format, "hf");
  EXPECT_EQ(d.config.head_dim, 24);
  EXPECT_EQ(llm::load_model(tmp.str("config.json")).format, "hf");
  // Any other existing file is a llama2.c checkpoint.
  EXPECT_EQ(llm::load_model(std::string(LLM_TEST_MODELS) + "/stories260K/stories260K.bin").format, "llama2c");
}

TEST(Rope, Llama3FrequenciesMatchTheIndependentReference) {
  // tests/data/llama3_inv_freq.json: tools/llama3_freqs.py (numpy, float64) after transformers' formula.
  json ref = read_json(fs::path(LLM_SOURCE_DIR) / "tests/data/llama3_inv_freq.json");
  for (const char* name : {"llama3.1-8b", "tiny-gqa"}) {
    SCOPED_TRACE(name);
    const json& r = ref["configs"][name];
    const llm::ModelConfig c = llm::load_synthetic(name).config;
    ASSERT_EQ(c.rope_scaling.type, "llama3");
    EXPECT_EQ(c.head_dim, r["head_dim"].get<int>());
    EXPECT_EQ(c.rope_theta, r["rope_theta"].get<float>());
    EXPECT_EQ(c.rope_scaling.factor, r["factor"].get<float>());
    EXPECT_EQ(c.rope_scaling.low_freq_factor, r["low_freq_factor"].get<float>());
    EXPECT_EQ(c.rope_scaling.high_freq_factor, r["high_freq_factor"].get<float>());
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, r["original_max_position_embeddings"].get<int>());
    const std::vector<float> got = llm::rope_inv_freq(c);
    const std::vector<double> want = r["inv_freq"];
    ASSERT_EQ(got.size(), want.size());
    int scaled = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "pair " << i;
      scaled += std::fabs(want[i] - std::pow(double(c.rope_theta), -2.0 * i / c.head_dim)) > 1e-9 * want[i];
    }
    EXPECT_GT(scaled, 0);  // the reference really exercises the scaling
  }
}

}  // namespace

// A Hugging Face directory's tokenizer: tokenizer.model when present, else tokenizer.json; the chat template from
// tokenizer_config.json (a string, or the older list of {name, template} whose "default" entry is the chat one).
TEST(HfDir, TokenizerFileAndChatTemplate) {
  TempDir tmp;
  llm::write_hf_model(llm::load_synthetic("tiny-gqa", 42), tmp.str("hf"));
  const fs::path dir = tmp.path() / "hf";
  Model m = llm::load_hf_dir(dir.string());
  EXPECT_EQ(m.tokenizer_path, "");
  EXPECT_EQ(m.chat_template, "");

  fs::copy_file(fs::path(LLM_SOURCE_DIR) / "tests/data/bpe_llama3_style.json", dir / "tokenizer.json");
  llm_test::write_file(dir / "tokenizer_config.json", R"({"chat_template": "{{ '<|start_header_id|>' }}"})");
  m = llm::load_hf_dir(dir.string());
  EXPECT_EQ(m.tokenizer_path, (dir / "tokenizer.json").string());
  EXPECT_EQ(m.chat_template, "{{ '<|start_header_id|>' }}");

  llm_test::write_file(dir / "tokenizer_config.json",
                       R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(llm::load_hf_dir(dir.string()).chat_template, "D");

  fs::copy_file(fs::path(LLM_TEST_MODELS) / "stories260K/tok512.model", dir / "tokenizer.model");
  EXPECT_EQ(llm::load_hf_dir(dir.string()).tokenizer_path, (dir / "tokenizer.model").string());

  llm_test::write_file(dir / "tokenizer_config.json", "{not json");
  llm_test::expect_error([&] { llm::load_hf_dir(dir.string()); }, {(dir / "tokenizer_config.json").string(), "not a JSON object"});
  llm_test::write_file(dir / "tokenizer_config.json", R"({"chat_template": 7})");
  llm_test::expect_error([&] { llm::load_hf_dir(dir.string()); }, {"chat_template must be a string"});
}
