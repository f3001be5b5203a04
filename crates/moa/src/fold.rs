//! Fold: the surviving views merged into one distribution.

use crate::config::{Merge, MoaError};
use crate::math;

/// Denominators (and KL arguments) are clamped here, so a zero probability never divides.
const CLAMP: f64 = 1e-12;

/// Deficit-weighted fold: p̄ = mean view, d_i = ‖p_i − p̄‖₂ (or KL(p_i ‖ p̄)), w_i = d_i / Σd
/// (uniform when Σd = 0), merged = Σ w_i p_i renormalized. Writes `weights` (one per view) and
/// `merged`.
pub fn deficit_weighted(
    views: &[&[f64]],
    use_kl: bool,
    weights: &mut Vec<f64>,
    merged: &mut Vec<f64>,
) {
    let len = views.first().map_or(0, |v| v.len());
    mean(views, len, merged);
    weights.clear();
    // Rounding can make a KL of (nearly) equal views a hair below 0.
    weights.extend(views.iter().map(|p| match use_kl {
        true => kl(p, merged).max(0.0),
        false => l2(p, merged),
    }));
    let total: f64 = weights.iter().sum();
    if total > 0.0 && total.is_finite() {
        weights.iter_mut().for_each(|w| *w /= total);
    } else {
        weights.fill(1.0 / views.len() as f64);
    }
    weighted_sum(views, weights, merged);
}

/// Uniform fold: every view weighs 1/k.
pub fn uniform(views: &[&[f64]], weights: &mut Vec<f64>, merged: &mut Vec<f64>) {
    weights.clear();
    weights.resize(views.len(), 1.0 / views.len() as f64);
    weighted_sum(views, weights, merged);
}

/// Complement vote over the views' scaled logits: agent i accepts candidate j when its scaled
/// logit is at least that agent's mean scaled logit; c_j = (accepts + 1)/(k + 1) and the merged
/// logit is the mean scaled logit × c_j. Writes merged logits (the caller applies softmax).
pub fn complement_vote(scaled: &[&[f64]], merged: &mut Vec<f64>) {
    let len = scaled.first().map_or(0, |v| v.len());
    let k = scaled.len() as f64;
    let means: Vec<f64> = scaled
        .iter()
        .map(|s| s.iter().sum::<f64>() / len as f64)
        .collect();
    mean(scaled, len, merged);
    for (j, m) in merged.iter_mut().enumerate() {
        let accepts = scaled
            .iter()
            .zip(&means)
            .filter(|(s, &mean)| s[j] >= mean)
            .count();
        *m *= (accepts as f64 + 1.0) / (k + 1.0);
    }
}

fn mean(views: &[&[f64]], len: usize, out: &mut Vec<f64>) {
    out.clear();
    out.resize(len, 0.0);
    for v in views {
        for (o, &p) in out.iter_mut().zip(v.iter()) {
            *o += p;
        }
    }
    let k = views.len() as f64;
    out.iter_mut().for_each(|o| *o /= k);
}

fn weighted_sum(views: &[&[f64]], weights: &[f64], out: &mut Vec<f64>) {
    let len = views.first().map_or(0, |v| v.len());
    out.clear();
    out.resize(len, 0.0);
    for (v, &w) in views.iter().zip(weights) {
        for (o, &p) in out.iter_mut().zip(v.iter()) {
            *o += w * p;
        }
    }
    normalize(out);
}

/// Scales to sum 1 (left alone if the sum is 0: nothing to scale).
pub fn normalize(p: &mut [f64]) {
    let sum: f64 = p.iter().sum();
    if sum > 0.0 {
        p.iter_mut().for_each(|x| *x /= sum);
    }
}

fn l2(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>()
        .sqrt()
}

/// KL(p ‖ q) in nats; terms with p = 0 are 0, arguments clamped at 1e-12.
pub fn kl(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .filter(|(a, _)| **a > 0.0)
        .map(|(&a, &b)| a * math::ln(a.max(CLAMP) / b.max(CLAMP)))
        .sum()
}

/// Shannon entropy in nats.
pub fn entropy(p: &[f64]) -> f64 {
    -p.iter()
        .filter(|&&x| x > 0.0)
        .map(|&x| x * math::ln(x))
        .sum::<f64>()
}

/// The result of [`merge_distributions`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Merged {
    pub merged: Vec<f64>,
    /// One per input distribution; 0 for a distribution raced out.
    pub weights: Vec<f64>,
    /// Survivors − 1.
    pub deficit: usize,
}

/// The fold as a pure function over caller-given distributions (the package's
/// `deficitWeightedMerge`): distributions holding NaN or ±inf are raced out (weight 0), the
/// rest are scaled to sum 1 and folded by `merge` (deficit-weighted or uniform; a vote needs
/// logits, not distributions).
pub fn merge_distributions(
    dists: &[Vec<f64>],
    merge: Merge,
    use_kl: bool,
) -> Result<Merged, MoaError> {
    let len = dists.first().map_or(0, Vec::len);
    if len == 0 {
        return Err(MoaError::Distributions(
            "a non-empty list of non-empty arrays",
        ));
    }
    if dists.iter().any(|d| d.len() != len) {
        return Err(MoaError::Distributions("all of the same length"));
    }
    if dists.iter().flatten().any(|&p| p < 0.0 && p.is_finite()) {
        return Err(MoaError::Distributions("non-negative"));
    }
    let survivors: Vec<usize> = (0..dists.len())
        .filter(|&i| dists[i].iter().all(|p| p.is_finite()))
        .collect();
    if survivors.is_empty() {
        return Err(MoaError::Distributions(
            "finite: every one holds NaN or infinity",
        ));
    }
    if survivors
        .iter()
        .any(|&i| dists[i].iter().sum::<f64>() <= 0.0)
    {
        return Err(MoaError::Distributions("each of positive sum"));
    }
    let normalized: Vec<Vec<f64>> = survivors
        .iter()
        .map(|&i| {
            let mut d = dists[i].clone();
            normalize(&mut d);
            d
        })
        .collect();
    let views: Vec<&[f64]> = normalized.iter().map(Vec::as_slice).collect();
    let (mut w, mut merged) = (Vec::new(), Vec::new());
    match merge {
        Merge::DeficitWeighted => deficit_weighted(&views, use_kl, &mut w, &mut merged),
        Merge::Uniform => uniform(&views, &mut w, &mut merged),
        Merge::ComplementVote => {
            return Err(MoaError::Distributions(
                "merged by deficit or uniform: the vote needs logits",
            ))
        }
    }
    let mut weights = vec![0.0; dists.len()];
    for (&i, &wi) in survivors.iter().zip(&w) {
        weights[i] = wi;
    }
    Ok(Merged {
        merged,
        weights,
        deficit: survivors.len() - 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < tol)
    }

    fn fold(dists: &[&[f64]]) -> (Vec<f64>, Vec<f64>) {
        let (mut w, mut m) = (Vec::new(), Vec::new());
        deficit_weighted(dists, false, &mut w, &mut m);
        (w, m)
    }

    #[test]
    fn deficit_weighted_vectors_of_the_issue() {
        let (w, _) = fold(&[&[1.0, 0.0], &[0.0, 1.0]]);
        assert!(close(&w, &[0.5, 0.5], 1e-12));
        let (w, m) = fold(&[&[1.0, 0.0], &[1.0, 0.0], &[0.0, 1.0]]);
        assert!(close(&w, &[0.25, 0.25, 0.5], 1e-12), "{w:?}");
        assert!(close(&m, &[0.5, 0.5], 1e-12), "{m:?}");
        let (w, m) = fold(&[&[0.7, 0.2, 0.1], &[0.5, 0.3, 0.2], &[0.2, 0.3, 0.5]]);
        assert!(close(&w, &[0.40221, 0.11155, 0.48624], 1e-5), "{w:?}");
        assert!(close(&m, &[0.43457, 0.25978, 0.30565], 1e-5), "{m:?}");
    }

    #[test]
    fn identical_views_fold_uniformly() {
        let (w, m) = fold(&[&[0.6, 0.4], &[0.6, 0.4], &[0.6, 0.4]]);
        assert!(close(&w, &[1.0 / 3.0; 3], 1e-12));
        assert!(close(&m, &[0.6, 0.4], 1e-12));
    }

    #[test]
    fn kl_distance_weighs_the_outlier_most() {
        let (mut w, mut m) = (Vec::new(), Vec::new());
        deficit_weighted(
            &[&[0.7, 0.2, 0.1], &[0.5, 0.3, 0.2], &[0.2, 0.3, 0.5]],
            true,
            &mut w,
            &mut m,
        );
        assert!(w[2] > w[0] && w[0] > w[1], "{w:?}");
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Zeros in p̄ are clamped, never a division by zero.
        deficit_weighted(&[&[1.0, 0.0], &[1.0, 0.0]], true, &mut w, &mut m);
        assert!(close(&w, &[0.5, 0.5], 1e-12) && close(&m, &[1.0, 0.0], 1e-12));
    }

    #[test]
    fn complement_vote_vector_of_the_issue() {
        // logits (3, 1, 0) at T = 0.4, 0.7, 1.0
        let l = [3.0f32, 1.0, 0.0];
        let scaled: Vec<Vec<f64>> = [0.4, 0.7, 1.0]
            .iter()
            .map(|t| {
                let mut s = vec![0.0; 3];
                crate::agents::scaled(&l, *t, &mut s);
                s
            })
            .collect();
        let views: Vec<&[f64]> = scaled.iter().map(Vec::as_slice).collect();
        let mut merged = Vec::new();
        complement_vote(&views, &mut merged);
        assert!(close(&merged, &[4.9286, 0.4107, 0.0], 1e-4), "{merged:?}");
    }

    #[test]
    fn merge_distributions_races_and_validates() {
        let m = merge_distributions(
            &[vec![1.0, 0.0], vec![f64::NAN, 1.0], vec![0.0, 1.0]],
            Merge::DeficitWeighted,
            false,
        )
        .unwrap();
        assert_eq!(m.weights, [0.5, 0.0, 0.5]);
        assert_eq!(m.deficit, 1);
        assert!(close(&m.merged, &[0.5, 0.5], 1e-12));
        let u = merge_distributions(&[vec![0.2, 0.8], vec![0.4, 0.6]], Merge::Uniform, false);
        assert!(close(&u.unwrap().merged, &[0.3, 0.7], 1e-12));
        let err = |d: &[Vec<f64>], m| merge_distributions(d, m, false).unwrap_err().to_string();
        assert!(err(&[], Merge::Uniform).contains("non-empty"));
        assert!(err(&[vec![1.0], vec![0.5, 0.5]], Merge::Uniform).contains("same length"));
        assert!(err(&[vec![-0.5, 1.5]], Merge::Uniform).contains("non-negative"));
        assert!(err(&[vec![f64::INFINITY]], Merge::Uniform).contains("finite"));
        assert!(err(&[vec![1.0]], Merge::ComplementVote).contains("needs logits"));
        assert!(err(&[vec![0.0, 0.0]], Merge::Uniform).contains("positive sum"));
        // Inputs are scaled to sum 1 first.
        let m = merge_distributions(&[vec![2.0, 2.0], vec![0.5, 0.5]], Merge::Uniform, false);
        assert!(close(&m.unwrap().merged, &[0.5, 0.5], 1e-12));
    }

    #[test]
    fn entropy_and_kl() {
        assert!((entropy(&[0.5, 0.5]) - std::f64::consts::LN_2).abs() < 1e-15);
        assert_eq!(entropy(&[1.0, 0.0]), 0.0);
        assert_eq!(kl(&[0.3, 0.7], &[0.3, 0.7]), 0.0);
    }
}
