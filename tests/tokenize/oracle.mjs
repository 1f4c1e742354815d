// oracle.mjs - the outside tokenizers shoal's encoder is checked against,
// and the tokenizer files the checks use, written from their packages.
//
//   node oracle.mjs files DIR
//       writes DIR/gpt2.tiktoken, cl100k_base.tiktoken, o200k_base.tiktoken
//       (tiktoken's own ranks), llama3.tiktoken (Llama 3's tokenizer.model:
//       llama3-tokenizer-js's vocabulary, rank = id), gpt2_tokenizer.bin
//       (llm.c's file of GPT-2), llama3.json (Llama 3's tokenizer.json:
//       its vocabulary and merges, Split + ByteLevel, ignore_merges) and
//       smol.json (a SmolLM2-style tokenizer.json: GPT-2's vocabulary, its
//       merges derived from the ranks, Digits + ByteLevel), gpt2.json (GPT-2's
//       own tokenizer.json: ByteLevel with its regex) and nfc.json
//       (a Qwen2-style one: GPT-2's vocabulary and merges, an NFC
//       normalizer, Qwen2's split), seq.json (GPT-2's vocabulary and
//       merges, DeepSeek-V3's empty Sequence normalizer, Llama 3's split as
//       a Split of behavior Removed, inverted: its matches kept, and as
//       they cover every character, Isolated's cut)
//   node oracle.mjs encode DIR NAME TEXT...
//       prints the ids of each TEXT file (read as UTF-8, invalid bytes as
//       U+FFFD), one line of space-separated ids per file: NAME gpt2,
//       cl100k_base, o200k_base, llama3 through tiktoken's encode_ordinary
//       (Rust, compiled to WASM); llama3.json, smol.json, nfc.json through
//       @huggingface/tokenizers without special tokens (seq.json too)
//   node oracle.mjs strip-numerics IN OUT
//       IN (as UTF-8) without its non-ASCII numerics (\p{N} but 0-9):
//       Hugging Face's Rust tokenizers split Digits on char::is_numeric,
//       the JS port on \d (0-9 only); shoal does as the Rust one, so the
//       JS oracle is asked only where the two agree
//   node oracle.mjs time DIR NAME TEXT REPEATS
//       encodes TEXT REPEATS times and prints the MB/s (bench-tokenize)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Tiktoken } from "tiktoken";
import { Tokenizer } from "@huggingface/tokenizers";
import llama3 from "llama3-tokenizer-js";

const require = createRequire(import.meta.url);
const encoders = path.join(path.dirname(require.resolve("tiktoken")), "encoders");
const LLAMA3_PATTERN = JSON.parse(fs.readFileSync(path.join(encoders, "cl100k_base.json"))).pat_str;
// Qwen2's tokenizer.json split: cl100k's with one digit a piece
const QWEN2_PATTERN = LLAMA3_PATTERN.replace("\\p{N}{1,3}", "\\p{N}");

// GPT-2's byte-to-unicode alphabet (tokenizer.json's vocabulary strings)
const byteToChar = [];
const charToByte = new Map();
{
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const c = String.fromCodePoint(printable ? b : 256 + extra++);
    byteToChar[b] = c;
    charToByte.set(c, b);
  }
}
const toChars = (bytes) => Array.from(bytes, (b) => byteToChar[b]).join("");
const fromChars = (s) => Buffer.from(Array.from(s, (c) => charToByte.get(c)));

// tiktoken's packed ranks ("! 0 base64 base64 ...") to [bytes, rank] pairs
function unpackRanks(packed) {
  const out = [];
  for (const line of packed.split("\n")) {
    if (!line) continue;
    const [, offset, ...tokens] = line.split(" ");
    tokens.forEach((t, i) => out.push([Buffer.from(t, "base64"), Number(offset) + i]));
  }
  return out;
}

function encoderJson(name) {
  return JSON.parse(fs.readFileSync(path.join(encoders, `${name}.json`)));
}

function llama3Ranks() {
  const out = [];
  for (let id = 0; id < 128000; id++) out.push([fromChars(llama3.vocabById[id]), id]);
  return out;
}

const LLAMA3_SPECIALS = {};
for (let id = 128000; id < 128256; id++) LLAMA3_SPECIALS[llama3.vocabById[id]] = id;

function tiktokenFile(ranks) {
  return ranks.map(([b, r]) => `${b.toString("base64")} ${r}\n`).join("");
}

// merges of a rank table, as Hugging Face's converter derives them: each
// token of two bytes or more splits where BPE on its bytes, with only the
// ranks below its own, stops at two parts
function deriveMerges(ranks) {
  const rankOf = new Map(ranks.map(([b, r]) => [b.toString("latin1"), r]));
  const merges = [];
  for (const [bytes, r] of ranks) {
    if (bytes.length < 2) continue;
    let parts = Array.from(bytes, (b) => Buffer.from([b]));
    for (;;) {
      let best = -1, bestRank = r;
      for (let i = 0; i + 1 < parts.length; i++) {
        const m = rankOf.get(Buffer.concat([parts[i], parts[i + 1]]).toString("latin1"));
        if (m !== undefined && m < bestRank) { best = i; bestRank = m; }
      }
      if (best < 0) break;
      parts.splice(best, 2, Buffer.concat([parts[best], parts[best + 1]]));
    }
    if (parts.length !== 2) throw new Error(`token ${r} does not split in two`);
    merges.push([r, `${toChars(parts[0])} ${toChars(parts[1])}`]);
  }
  return merges.sort((a, b) => a[0] - b[0]).map((m) => m[1]);
}

function hfJson(vocab, merges, added, preTokenizer, ignoreMerges, normalizer = null) {
  return JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: Object.entries(added).map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer, pre_tokenizer: preTokenizer, post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
             vocab, merges },
  });
}

function files(dir) {
  fs.mkdirSync(dir, { recursive: true });
  const gpt2 = unpackRanks(encoderJson("gpt2").bpe_ranks);
  for (const name of ["gpt2", "cl100k_base", "o200k_base"]) {
    const ranks = name === "gpt2" ? gpt2 : unpackRanks(encoderJson(name).bpe_ranks);
    fs.writeFileSync(path.join(dir, `${name}.tiktoken`), tiktokenFile(ranks));
  }
  fs.writeFileSync(path.join(dir, "llama3.tiktoken"), tiktokenFile(llama3Ranks()));
  // llm.c's file: 256 uint32 of header, then length byte + bytes per id
  const header = Buffer.alloc(1024);
  header.writeUInt32LE(20240328, 0);
  header.writeUInt32LE(2, 4);
  header.writeUInt32LE(50257, 8);
  header.writeUInt32LE(50256, 12);
  const body = [];
  for (const [b] of [...gpt2].sort((x, y) => x[1] - y[1])) body.push(Buffer.from([b.length]), b);
  body.push(Buffer.from([13]), Buffer.from("<|endoftext|>"));
  fs.writeFileSync(path.join(dir, "gpt2_tokenizer.bin"), Buffer.concat([header, ...body]));
  // Llama 3's tokenizer.json
  const vocab = {};
  for (let id = 0; id < 128000; id++) vocab[llama3.vocabById[id]] = id;
  const merges = [...llama3.merges.entries()].sort((a, b) => a[1] - b[1]).map((m) => m[0]);
  fs.writeFileSync(path.join(dir, "llama3.json"), hfJson(vocab, merges, LLAMA3_SPECIALS, {
    type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] }, true));
  // SmolLM2's kind: digits alone, then GPT-2's split, merges without ignore_merges
  const smolVocab = {};
  for (const [b, r] of gpt2) smolVocab[toChars(b)] = r;
  const gpt2Merges = deriveMerges(gpt2);
  fs.writeFileSync(path.join(dir, "smol.json"), hfJson(smolVocab, gpt2Merges, { "<|endoftext|>": 50256 }, {
    type: "Sequence", pretokenizers: [
      { type: "Digits", individual_digits: true },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }] }, false));
  // GPT-2's own tokenizer.json (Hugging Face's openai-community/gpt2): ByteLevel
  // with its regex, <|endoftext|> in the vocabulary and an added token
  fs.writeFileSync(path.join(dir, "gpt2.json"), hfJson({ ...smolVocab, "<|endoftext|>": 50256 }, gpt2Merges,
    { "<|endoftext|>": 50256 }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    false));
  // Qwen2's kind: NFC first, its split (one digit a piece), then bytes
  fs.writeFileSync(path.join(dir, "nfc.json"), hfJson(smolVocab, gpt2Merges, { "<|endoftext|>": 50256 }, {
    type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] }, false,
    { type: "NFC" }));
  fs.writeFileSync(path.join(dir, "seq.json"), hfJson(smolVocab, gpt2Merges, { "<|endoftext|>": 50256 }, {
    type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Removed", invert: true },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] }, false,
    { type: "Sequence", normalizers: [] }));
}

function encoder(dir, name) {
  if (name.endsWith(".json")) {
    const t = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, name))), {});
    return (text) => t.encode(text, { add_special_tokens: false }).ids;
  }
  let enc;
  if (name === "llama3") {
    const packed = "! 0 " + llama3Ranks().map(([b]) => b.toString("base64")).join(" ");
    enc = new Tiktoken(packed, LLAMA3_SPECIALS, LLAMA3_PATTERN);
  } else {
    const e = encoderJson(name);
    enc = new Tiktoken(e.bpe_ranks, e.special_tokens, e.pat_str);
  }
  return (text) => Array.from(enc.encode_ordinary(text));
}

const [cmd, dir, name, ...rest] = process.argv.slice(2);
if (cmd === "files") {
  files(dir);
} else if (cmd === "encode") {
  const encode = encoder(dir, name);
  for (const f of rest) process.stdout.write(encode(fs.readFileSync(f, "utf8")).join(" ") + "\n");
} else if (cmd === "strip-numerics") {
  fs.writeFileSync(name, fs.readFileSync(dir, "utf8").replace(/(?![0-9])\p{N}/gu, ""));
} else if (cmd === "time") {
  const encode = encoder(dir, name);
  const text = fs.readFileSync(rest[0], "utf8"), repeats = Number(rest[1]);
  const bytes = Buffer.byteLength(text);
  encode(text);   // warm
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < repeats; i++) encode(text);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  process.stdout.write(`${(bytes * repeats / s / 1e6).toFixed(2)}\n`);
} else {
  process.stderr.write("usage: node oracle.mjs files DIR | encode DIR NAME TEXT... | strip-numerics IN OUT | " +
    "time DIR NAME TEXT REPEATS\n");
  process.exit(2);
}
