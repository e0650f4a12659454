//! find_executable_batch_size with closures (the C-level checks: tests/capi/test_memory.c): a step failing above
//! a size lands on the largest of the sequence that fits, with either factor; other errors end the search with
//! their status; a real forward pass under max_memory_bytes.
use accel::{find_executable_batch_size, Error, Model, Status, Tensor};

fn fails_above(fits: i64, tried: &mut Vec<i64>) -> impl FnMut(i64) -> accel::Result<()> + '_ {
    move |batch_size| {
        tried.push(batch_size);
        if batch_size > fits {
            return Err(Error::new(Status::ResourceExhausted, "out of memory (a test's step)"));
        }
        Ok(())
    }
}

#[test]
fn lands_on_the_largest_size_that_fits() -> accel::Result<()> {
    let mut tried = Vec::new();
    assert_eq!(find_executable_batch_size(128, None, fails_above(37, &mut tried))?, 32);
    assert_eq!(tried, vec![128, 64, 32]);

    let mut tried = Vec::new();
    let found = find_executable_batch_size(128, Some(r#"{"reduce_batch_size_factor": 0.9}"#), fails_above(37, &mut tried))?;
    assert_eq!(found, 36);
    assert_eq!(tried, vec![128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36]);
    Ok(())
}

#[test]
fn other_errors_and_zero_end_the_search() {
    let mut tried = Vec::new();
    let err = find_executable_batch_size(64, None, |batch_size| {
        tried.push(batch_size);
        if batch_size > 32 {
            return Err(Error::new(Status::ResourceExhausted, "out of memory"));
        }
        Err(Error::new(Status::NotFound, "the data set is gone"))
    })
    .err()
    .expect("an error");
    assert_eq!(err.status(), Status::NotFound);
    assert!(err.message().contains("batch size 32: the data set is gone"), "{err}");
    assert_eq!(tried, vec![64, 32]);

    let mut tried = Vec::new();
    let err = find_executable_batch_size(4, None, fails_above(0, &mut tried)).err().expect("an error");
    assert_eq!(err.status(), Status::ResourceExhausted);
    assert!(err.message().contains("reached zero"), "{err}");
    assert_eq!(tried, vec![4, 2, 1]);

    let err = find_executable_batch_size(4, None, |_| -> accel::Result<()> { panic!("boom") }).err().expect("an error");
    assert_eq!(err.status(), Status::Unknown);
    let err = find_executable_batch_size(4, Some(r#"{"reduce_batch_size_factor": 2}"#), |_| Ok(())).err().expect("an error");
    assert_eq!(err.status(), Status::InvalidArgument);
}

#[test]
fn a_forward_pass_under_a_memory_budget() -> accel::Result<()> {
    let mut model = Model::from_json(r#"{"type": "mlp", "widths": [256, 1024, 4]}"#)?;
    let mut statuses = Vec::new();
    let found = find_executable_batch_size(1024, Some(r#"{"max_memory_bytes": "4MB"}"#), |batch_size| {
        let x = Tensor::from_slice(&vec![0f32; batch_size as usize * 256], &[batch_size, 256])?;
        let r = model.forward(&x).map(|_| ());
        statuses.push((batch_size, r.as_ref().err().map(|e| e.status())));
        r
    })?;
    assert_eq!(found, 256);
    assert_eq!(statuses, vec![(1024, Some(Status::ResourceExhausted)), (512, Some(Status::ResourceExhausted)), (256, None)]);
    Ok(())
}
