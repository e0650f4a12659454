//! Datasets written in Rust (issue 35): a map closure and an iterable dataset give a tensor loader's
//! batches, workers give the same batches, an Err in a callback fails next_batch with its message, a collate
//! closure, the "pad" collate's attention mask, and an iterable with state resumes exactly; documents packed
//! into windows ("packing") equal the hand-packed stream's windows and resume exactly.
use accel::{dataset_error, Accelerator, Collated, DataLoader, IterableDataset, NoCollate, Sample, Tensor};

const N: i64 = 22;

fn row(i: i64) -> accel::Result<Sample> {
    Ok(Sample {
        inputs: Tensor::from_slice(&[i as f32, -(i as f32)], &[2])?,
        labels: Some(Tensor::from_slice(&[100 + i], &[])?),
    })
}

fn pass(dl: &mut DataLoader) -> accel::Result<Vec<(Vec<f32>, Vec<i64>)>> {
    let mut out = Vec::new();
    for b in dl.pass() {
        let b = b?;
        out.push((b.inputs()?.to_vec::<f32>()?, b.labels()?.unwrap().to_vec::<i64>()?));
    }
    Ok(out)
}

fn tensor_loader(config: &str) -> accel::Result<DataLoader> {
    let x: Vec<f32> = (0..N).flat_map(|i| [i as f32, -(i as f32)]).collect();
    let y: Vec<i64> = (0..N).map(|i| 100 + i).collect();
    DataLoader::new(&Tensor::from_slice(&x, &[N, 2])?, Some(&Tensor::from_slice(&y, &[N])?), config)
}

struct Stream {
    pos: i64,
    epochs: std::sync::Arc<std::sync::Mutex<Vec<i64>>>,
}

impl IterableDataset for Stream {
    fn set_epoch(&mut self, epoch: i64) -> accel::Result<()> {
        self.epochs.lock().unwrap().push(epoch);
        self.pos = 0;
        Ok(())
    }
    fn next(&mut self) -> accel::Result<Option<Sample>> {
        if self.pos >= N {
            return Ok(None);
        }
        self.pos += 1;
        row(self.pos - 1).map(Some)
    }
    fn stateful(&self) -> bool {
        true
    }
    fn state(&mut self) -> accel::Result<Vec<u8>> {
        Ok(self.pos.to_le_bytes().to_vec())
    }
    fn load_state(&mut self, state: &[u8]) -> accel::Result<()> {
        self.pos = i64::from_le_bytes(state.try_into().map_err(|_| dataset_error("bad state"))?);
        Ok(())
    }
}

fn stream() -> (Stream, std::sync::Arc<std::sync::Mutex<Vec<i64>>>) {
    let epochs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    (Stream { pos: 0, epochs: epochs.clone() }, epochs)
}

#[test]
fn map_and_iterable_equal_the_tensor_loader() -> accel::Result<()> {
    for config in [r#"{"batch_size": 4}"#, r#"{"batch_size": 3, "shuffle": true, "seed": 7}"#] {
        let want = pass(&mut tensor_loader(config)?)?;
        let mut dl = DataLoader::from_map_dataset(N, row, None::<NoCollate>, config)?;
        assert_eq!(pass(&mut dl)?, want);
        for workers in [2, 4] {
            let c = config.replace('}', &format!(r#", "num_workers": {workers}}}"#));
            assert_eq!(pass(&mut DataLoader::from_map_dataset(N, row, None::<NoCollate>, &c)?)?, want);
        }
    }
    let want = pass(&mut tensor_loader(r#"{"batch_size": 4}"#)?)?;
    let (s, epochs) = stream();
    let mut dl = DataLoader::from_iterable_dataset(s, None::<NoCollate>, r#"{"batch_size": 4}"#)?;
    assert_eq!(pass(&mut dl)?, want);
    assert_eq!(pass(&mut dl)?, want);
    assert_eq!(*epochs.lock().unwrap(), vec![0, 1]);
    Ok(())
}

#[test]
fn errors_in_callbacks_fail_next_batch() -> accel::Result<()> {
    for workers in [0, 2] {
        let get = |i: i64| if i == 7 { Err(dataset_error("row 7 is missing from the table")) } else { row(i) };
        let config = format!(r#"{{"batch_size": 4, "num_workers": {workers}}}"#);
        let mut dl = DataLoader::from_map_dataset(N, get, None::<NoCollate>, &config)?;
        assert!(dl.next_batch()?.is_some());
        let e = dl.next_batch().err().expect("get(7) fails");
        assert!(e.message().contains("row 7 is missing from the table"), "{}", e.message());
        let mut panicking = DataLoader::from_map_dataset(N, |_| panic!("boom"), None::<NoCollate>, &config)?;
        assert!(panicking.next_batch().err().unwrap().message().contains("a panic in a dataset callback"));
    }
    Ok(())
}

#[test]
fn collate_closure_and_pad() -> accel::Result<()> {
    let sum = |samples: &[accel::SampleRef<'_>]| -> accel::Result<Collated> {
        let mut x = Vec::new();
        let mut y = Vec::new();
        for s in samples {
            let v = s.inputs.to_vec::<f32>()?;
            x.push(v[0] + v[1] + 1.0);
            y.push(s.labels.unwrap().to_vec::<i64>()?[0]);
        }
        let n = samples.len() as i64;
        Ok(Collated { inputs: Tensor::from_slice(&x, &[n, 1])?, labels: Some(Tensor::from_slice(&y, &[n])?), attention_mask: None })
    };
    let mut dl = DataLoader::from_map_dataset(N, row, Some(sum), r#"{"batch_size": 3}"#)?;
    let b = dl.next_batch()?.unwrap();
    assert_eq!(b.inputs()?.to_vec::<f32>()?, vec![1.0, 1.0, 1.0]);
    assert_eq!(b.labels()?.unwrap().to_vec::<i64>()?, vec![100, 101, 102]);

    let seq = |i: i64| -> accel::Result<Sample> {
        let t: Vec<i64> = (0..(i % 4 + 2)).map(|k| 10 * i + k + 1).collect();
        Ok(Sample { inputs: Tensor::from_slice(&t, &[t.len() as i64])?, labels: None })
    };
    let mut dl = DataLoader::from_map_dataset(6, seq, None::<NoCollate>, r#"{"batch_size": 2, "collate": "pad"}"#)?;
    let b = dl.next_batch()?.unwrap();
    assert_eq!(b.inputs()?.to_vec::<i64>()?, vec![1, 2, 0, 11, 12, 13]);
    assert_eq!(b.labels()?.unwrap().to_vec::<i64>()?, vec![1, 2, -100, 11, 12, 13]);
    assert_eq!(b.attention_mask()?.unwrap().to_vec::<i64>()?, vec![1, 1, 0, 1, 1, 1]);
    Ok(())
}

#[test]
fn iterable_resumes_from_its_state() -> accel::Result<()> {
    let dir = std::env::temp_dir().join(format!("accel-rust-datasets-{}", std::process::id()));
    let ckpt = dir.join("ckpt");
    let ckpt = ckpt.to_str().unwrap();
    let rest = {
        let mut acc = Accelerator::new(None)?;
        let (s, _) = stream();
        let mut dl = DataLoader::from_iterable_dataset(s, None::<NoCollate>, r#"{"batch_size": 3}"#)?;
        acc.prepare(None, None, Some(&mut dl), None)?;
        pass(&mut dl)?;
        dl.next_batch()?;
        dl.next_batch()?;
        acc.save_state(ckpt)?;
        pass(&mut dl)?
    };
    let mut acc = Accelerator::new(None)?;
    let (s, epochs) = stream();
    let mut dl = DataLoader::from_iterable_dataset(s, None::<NoCollate>, r#"{"batch_size": 3}"#)?;
    acc.prepare(None, None, Some(&mut dl), None)?;
    acc.load_state(ckpt)?;
    assert_eq!(pass(&mut dl)?, rest);
    assert_eq!(*epochs.lock().unwrap(), vec![1]);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Documents d = 10d, 10d + 1, ... (1 + d % 3 tokens), 9 of them; the state is the next document.
struct Documents {
    pos: i64,
}

impl IterableDataset for Documents {
    fn set_epoch(&mut self, _epoch: i64) -> accel::Result<()> {
        self.pos = 0;
        Ok(())
    }
    fn next(&mut self) -> accel::Result<Option<Sample>> {
        if self.pos >= 9 {
            return Ok(None);
        }
        let doc: Vec<i64> = (0..=self.pos % 3).map(|k| 10 * self.pos + k).collect();
        self.pos += 1;
        Ok(Some(Sample { inputs: Tensor::from_slice(&doc, &[doc.len() as i64])?, labels: None }))
    }
    fn stateful(&self) -> bool {
        true
    }
    fn state(&mut self) -> accel::Result<Vec<u8>> {
        Ok(self.pos.to_le_bytes().to_vec())
    }
    fn load_state(&mut self, state: &[u8]) -> accel::Result<()> {
        self.pos = i64::from_le_bytes(state.try_into().map_err(|_| dataset_error("bad state"))?);
        Ok(())
    }
}

fn token_pass(dl: &mut DataLoader) -> accel::Result<Vec<(Vec<i64>, Vec<i64>)>> {
    let mut out = Vec::new();
    for b in dl.pass() {
        let b = b?;
        out.push((b.inputs()?.to_vec::<i64>()?, b.labels()?.unwrap().to_vec::<i64>()?));
    }
    Ok(out)
}

#[test]
fn packs_documents_and_resumes() -> accel::Result<()> {
    let packing = r#"{"batch_size": 2, "packing": {"block_size": 3, "eos_token_id": -1}}"#;
    // Each document, then EOS -1; windows of 4 tokens 3 apart.
    let stream: Vec<i64> = (0..9i64).flat_map(|d| (0..=d % 3).map(move |k| 10 * d + k).chain([-1])).collect();
    let dir = std::env::temp_dir().join(format!("accel-rust-packing-{}", std::process::id()));
    let ckpt = dir.join("ckpt");
    let ckpt = ckpt.to_str().unwrap();
    let rest = {
        let mut acc = Accelerator::new(None)?;
        let mut dl = DataLoader::from_iterable_dataset(Documents { pos: 0 }, None::<NoCollate>, packing)?;
        acc.prepare(None, None, Some(&mut dl), None)?;
        let b = dl.next_batch()?.unwrap();
        assert_eq!(b.inputs()?.to_vec::<i64>()?, stream[0..6].to_vec()); // windows 0 and 1
        assert_eq!(b.labels()?.unwrap().to_vec::<i64>()?, stream[1..7].to_vec());
        dl.next_batch()?;
        acc.save_state(ckpt)?;
        token_pass(&mut dl)?
    };
    assert_eq!(rest.len(), 3); // 27 tokens: 8 full windows and a short one, in batches of 2
    let mut acc = Accelerator::new(None)?;
    let mut dl = DataLoader::from_iterable_dataset(Documents { pos: 0 }, None::<NoCollate>, packing)?;
    acc.prepare(None, None, Some(&mut dl), None)?;
    acc.load_state(ckpt)?;
    assert_eq!(token_pass(&mut dl)?, rest);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
