//! `tir-embed` as a user meets it: the similarity matrix of the README's sentences, the JSON
//! form, and refusals that are one line with exit code 1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SENTENCES: [&str; 3] = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
];

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tools/models/all-MiniLM-L6-v2")
}

fn tir_embed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tir-embed"))
        .args(args)
        .env_remove("TIR_MINILM_DIR")
        .output()
        .expect("tir-embed runs")
}

fn with_model<'a>(dir: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--model", dir];
    args.extend(rest);
    args
}

fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in {err}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn the_readme_sentences_give_the_readme_similarities() {
    let dir = model_dir().display().to_string();
    let out = tir_embed(&with_model(&dir, &SENTENCES));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("3 x 384 embeddings"), "{text}");
    assert!(text.contains("  1.0000  0.6660  0.1046\n"), "{text}");
    assert!(text.contains("  0.1046  0.1411  1.0000\n"), "{text}");

    let mut args = with_model(&dir, &["--json"]);
    args.extend(SENTENCES);
    let out = tir_embed(&args);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["embeddings"].as_array().unwrap().len(), 3);
    assert_eq!(value["embeddings"][0].as_array().unwrap().len(), 384);
    let s01 = value["similarity"][0][1].as_f64().unwrap();
    assert!((s01 - 0.6660).abs() < 5e-5, "{s01}");
}

#[test]
fn tensor_parallel_gives_the_same_similarities() {
    let dir = model_dir().display().to_string();
    let mut args = with_model(&dir, &["--tensor-parallel", "2"]);
    args.extend(SENTENCES);
    let out = tir_embed(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("(tensor-parallel over 2 devices, 60 of 101 weights split)"),
        "{text}"
    );
    assert!(text.contains("  1.0000  0.6660  0.1046\n"), "{text}");
    assert!(text.contains("  0.1046  0.1411  1.0000\n"), "{text}");
    let mut args = with_model(&dir, &["--tensor-parallel", "5"]);
    args.extend(SENTENCES);
    refused(
        &tir_embed(&args),
        &["over 5 devices splits nothing in this graph"],
    );
}

/// A copy of the model directory (large files linked) with `file` replaced by `text`.
fn altered(dir: &Path, file: &str, text: &str) -> String {
    let src = model_dir();
    std::fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "modules.json", "sentence_bert_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    std::fs::copy(
        src.join("1_Pooling/config.json"),
        dir.join("1_Pooling/config.json"),
    )
    .unwrap();
    for f in ["tokenizer.json", "model.safetensors"] {
        std::os::unix::fs::symlink(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join(file), text).unwrap();
    dir.display().to_string()
}

#[test]
fn what_tir_embed_cannot_run_is_refused_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere").display().to_string();
    refused(
        &tir_embed(&with_model(&missing, &["hello"])),
        &["nowhere/config.json", "scripts/install-minilm.sh"],
    );
    let cls = altered(
        &tmp.path().join("cls"),
        "1_Pooling/config.json",
        r#"{"pooling_mode_mean_tokens": false, "pooling_mode_cls_token": true}"#,
    );
    refused(
        &tir_embed(&with_model(&cls, &["hello"])),
        &["1_Pooling/config.json", "pooling_mode_mean_tokens"],
    );
    let roberta = altered(
        &tmp.path().join("roberta"),
        "config.json",
        r#"{"model_type": "roberta"}"#,
    );
    refused(
        &tir_embed(&with_model(&roberta, &["hello"])),
        &["config.json", "`model_type` is \"roberta\""],
    );
    let broken = altered(&tmp.path().join("broken"), "config.json", "{not json");
    refused(
        &tir_embed(&with_model(&broken, &["hello"])),
        &["not valid JSON"],
    );
    let dir = model_dir().display().to_string();
    refused(
        &tir_embed(&with_model(&dir, &["--dtype", "f64", "hello"])),
        &["f64"],
    );
    refused(&tir_embed(&with_model(&dir, &[])), &["SENTENCE"]);
}
