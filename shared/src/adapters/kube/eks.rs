//! The EKS IAM authentication token, as `aws eks get-token` and aws-iam-authenticator make it.
//!
//! The token is a presigned STS `GetCallerIdentity` URL: SigV4 in the query string
//! (`X-Amz-Expires=60`), with the cluster name in the signed header `x-k8s-aws-id`. The API
//! server hands it to STS, which answers with the caller's identity; EKS maps that identity to
//! Kubernetes users and groups (access entries or `aws-auth`). EKS accepts the token for 15
//! minutes after `X-Amz-Date`, whatever `X-Amz-Expires` says, so tokens are cached for
//! [`TOKEN_CACHE_LIFETIME`] (14 minutes) and made anew on the next use after that.
//!
//! `token = "k8s-aws-v1." + base64url_without_padding(url)`.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::ports::BoxError;

/// What every EKS token starts with.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The signed header that names the cluster, so a token for one cluster is refused by another.
pub const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";
/// `X-Amz-Expires` of the presigned URL (what `aws eks get-token` uses).
pub const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);
/// How long a token is used before a new one is made (EKS accepts one for 15 minutes).
pub const TOKEN_CACHE_LIFETIME: Duration = Duration::from_secs(14 * 60);

/// A token that could not be made, or read back.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("presigning the STS GetCallerIdentity URL for cluster {cluster}: {source}")]
    Sign {
        cluster: String,
        /// The signer's error.
        #[source]
        source: BoxError,
    },
    #[cfg(any(test, feature = "fixtures"))]
    #[error("not an EKS token: {0}")]
    NotAToken(String),
}

/// The STS host of a region (`sts.<region>.amazonaws.com`, `.amazonaws.com.cn` in China).
pub fn sts_host(region: &str) -> String {
    let china = if region.starts_with("cn-") { ".cn" } else { "" };
    format!("sts.{region}.amazonaws.com{china}")
}

/// The presigned `GetCallerIdentity` URL for `cluster`, signed at `time` (an error is the
/// signer's, or the URL's).
pub fn presigned_url(
    cluster: &str,
    region: &str,
    credentials: &Credentials,
    time: SystemTime,
) -> Result<String, BoxError> {
    let host = sts_host(region);
    let base = format!("https://{host}/?Action=GetCallerIdentity&Version=2011-06-15");
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(time)
        .settings(settings)
        .build()?
        .into();
    let request = SignableRequest::new(
        "GET",
        Cow::Borrowed(base.as_str()),
        std::iter::once((CLUSTER_ID_HEADER, cluster)),
        SignableBody::Bytes(&[]),
    )?;
    let (instructions, _signature) = sign(request, &params)?.into_parts();
    let (_headers, query) = instructions.into_parts();
    // Percent-encoded (every value is base64, hex, digits or `/`, `;`, `-`: encoded as SigV4's
    // canonical query string encodes them, so the URL sent is the one signed).
    let mut url = url::Url::parse(&base)?;
    url.query_pairs_mut().extend_pairs(query);
    Ok(url.into())
}

/// The EKS token for `cluster`, signed at `time`.
pub fn eks_token(
    cluster: &str,
    region: &str,
    credentials: &Credentials,
    time: SystemTime,
) -> Result<String, TokenError> {
    let url = presigned_url(cluster, region, credentials, time).map_err(|source| {
        let cluster = cluster.to_string();
        TokenError::Sign { cluster, source }
    })?;
    Ok(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(url)))
}

/// The presigned URL inside a token (what the tests read back).
#[cfg(any(test, feature = "fixtures"))]
pub fn url_from_token(token: &str) -> Result<String, TokenError> {
    let encoded = token
        .strip_prefix(TOKEN_PREFIX)
        .ok_or_else(|| TokenError::NotAToken(format!("it does not start with {TOKEN_PREFIX}")))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|e| TokenError::NotAToken(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| TokenError::NotAToken(e.to_string()))
}

#[cfg(test)]
mod tests {
    //! The token against the documented algorithm: SigV4 query-string signing
    //! (<https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html>), recomputed
    //! here with an independent SHA-256/HMAC, so a change in aws-sigv4 or in how the URL is put
    //! together shows.

    use super::*;
    use std::collections::BTreeMap;

    const AKID: &str = "AKIDEXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const CLUSTER: &str = "demo";
    const REGION: &str = "us-east-1";

    /// 2026-11-20T10:00:00Z
    fn fixed_time() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_168_800)
    }

    fn creds(token: Option<&str>) -> Credentials {
        Credentials::new(AKID, SECRET, token.map(str::to_string), None, "test")
    }

    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' && i + 2 < bytes.len() {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    /// (host, path, raw query pairs in order).
    fn split(url: &str) -> (String, String, Vec<(String, String)>) {
        let rest = url.strip_prefix("https://").unwrap();
        let (authority, path_query) = rest.split_once('/').unwrap();
        let (path, query) = path_query.split_once('?').unwrap();
        let pairs = query
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        (authority.to_string(), format!("/{path}"), pairs)
    }

    #[test]
    fn token_is_the_base64url_of_the_presigned_url() {
        let t = fixed_time();
        let token = eks_token(CLUSTER, REGION, &creds(None), t).unwrap();
        assert!(token.starts_with("k8s-aws-v1."));
        assert!(!token.contains('='), "no padding: {token}");
        assert!(
            !token.contains('+') && !token.contains('/'),
            "url-safe: {token}"
        );
        let url = url_from_token(&token).unwrap();
        assert_eq!(
            url,
            presigned_url(CLUSTER, REGION, &creds(None), t).unwrap()
        );
        assert!(
            url.starts_with(
                "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
            ),
            "{url}"
        );
        assert!(matches!(
            url_from_token("Bearer x"),
            Err(TokenError::NotAToken(_))
        ));
    }

    #[test]
    fn url_parameters_follow_the_documented_algorithm() {
        let url = presigned_url(CLUSTER, REGION, &creds(None), fixed_time()).unwrap();
        let (host, path, pairs) = split(&url);
        assert_eq!(host, "sts.us-east-1.amazonaws.com");
        assert_eq!(path, "/");
        let params: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| (decode(k), decode(v))).collect();
        assert_eq!(params["Action"], "GetCallerIdentity");
        assert_eq!(params["Version"], "2011-06-15");
        assert_eq!(params["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(
            params["X-Amz-Credential"],
            "AKIDEXAMPLE/20261120/us-east-1/sts/aws4_request"
        );
        assert_eq!(params["X-Amz-Date"], "20261120T100000Z");
        assert_eq!(params["X-Amz-Expires"], "60");
        assert_eq!(params["X-Amz-SignedHeaders"], "host;x-k8s-aws-id");
        assert!(!params.contains_key("X-Amz-Security-Token"));
        let signature = &params["X-Amz-Signature"];
        assert_eq!(signature.len(), 64);
        assert!(
            signature
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(params.len(), 8, "{params:?}");
        // The credential's slashes are encoded in the URL.
        assert!(
            url.contains(
                "X-Amz-Credential=AKIDEXAMPLE%2F20261120%2Fus-east-1%2Fsts%2Faws4_request"
            )
        );

        assert_eq!(signature, &expected_signature(&pairs, &host));
    }

    #[test]
    fn session_tokens_are_signed_too() {
        let session = "FQoGZXIvYXdzE+token/with=chars";
        let url = presigned_url(CLUSTER, REGION, &creds(Some(session)), fixed_time()).unwrap();
        let (host, _, pairs) = split(&url);
        let token = pairs
            .iter()
            .find(|(k, _)| k == "X-Amz-Security-Token")
            .map(|(_, v)| decode(v));
        assert_eq!(token.as_deref(), Some(session));
        let signature = pairs
            .iter()
            .find(|(k, _)| k == "X-Amz-Signature")
            .map(|(_, v)| v.clone())
            .unwrap();
        assert_eq!(signature, expected_signature(&pairs, &host));
    }

    #[test]
    fn the_cluster_name_is_part_of_the_signature() {
        let a = presigned_url("a", REGION, &creds(None), fixed_time()).unwrap();
        let b = presigned_url("b", REGION, &creds(None), fixed_time()).unwrap();
        assert_ne!(a, b);
        assert_eq!(sts_host("cn-north-1"), "sts.cn-north-1.amazonaws.com.cn");
    }

    /// SigV4 by the book: canonical request, string to sign, derived key, HMAC.
    fn expected_signature(pairs: &[(String, String)], host: &str) -> String {
        // Canonical query: every parameter but the signature, sorted by encoded name.
        let mut query: Vec<(String, String)> = pairs
            .iter()
            .filter(|(k, _)| k != "X-Amz-Signature")
            .cloned()
            .collect();
        query.sort();
        let canonical_query = query
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| decode(v))
                .unwrap()
        };
        let date_time = get("X-Amz-Date");
        let date = &date_time[..8];
        let canonical_request = format!(
            "GET\n/\n{canonical_query}\nhost:{host}\nx-k8s-aws-id:{CLUSTER}\n\nhost;x-k8s-aws-id\n{}",
            hex(&sha256(b""))
        );
        let scope = format!("{date}/{REGION}/sts/aws4_request");
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{date_time}\n{scope}\n{}",
            hex(&sha256(canonical_request.as_bytes()))
        );
        let k_date = hmac(format!("AWS4{SECRET}").as_bytes(), date.as_bytes());
        let k_region = hmac(&k_date, REGION.as_bytes());
        let k_service = hmac(&k_region, b"sts");
        let k_signing = hmac(&k_service, b"aws4_request");
        hex(&hmac(&k_signing, string_to_sign.as_bytes()))
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
        let mut block = [0u8; 64];
        if key.len() > 64 {
            block[..32].copy_from_slice(&sha256(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let mut inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
        inner.extend_from_slice(message);
        let mut outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
        outer.extend_from_slice(&sha256(&inner));
        sha256(&outer)
    }

    /// FIPS 180-4 SHA-256.
    fn sha256(data: &[u8]) -> [u8; 32] {
        const K: [u32; 64] = [
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
            0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
            0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
            0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
            0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
            0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
            0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
            0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
            0xc67178f2,
        ];
        let mut h: [u32; 8] = [
            0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
            0x5be0cd19,
        ];
        let mut msg = data.to_vec();
        let bit_len = (data.len() as u64) * 8;
        msg.push(0x80);
        while msg.len() % 64 != 56 {
            msg.push(0);
        }
        msg.extend_from_slice(&bit_len.to_be_bytes());
        for chunk in msg.chunks(64) {
            let mut w = [0u32; 64];
            for (i, word) in chunk.chunks(4).enumerate() {
                w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
            }
            for i in 16..64 {
                let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
                let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
                w[i] = w[i - 16]
                    .wrapping_add(s0)
                    .wrapping_add(w[i - 7])
                    .wrapping_add(s1);
            }
            let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
            for i in 0..64 {
                let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
                let ch = (e & f) ^ (!e & g);
                let t1 = hh
                    .wrapping_add(s1)
                    .wrapping_add(ch)
                    .wrapping_add(K[i])
                    .wrapping_add(w[i]);
                let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
                let maj = (a & b) ^ (a & c) ^ (b & c);
                let t2 = s0.wrapping_add(maj);
                hh = g;
                g = f;
                f = e;
                e = d.wrapping_add(t1);
                d = c;
                c = b;
                b = a;
                a = t1.wrapping_add(t2);
            }
            for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
                *x = x.wrapping_add(y);
            }
        }
        let mut out = [0u8; 32];
        for (i, word) in h.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
        }
        out
    }

    #[test]
    fn the_test_hashes_are_right() {
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // RFC 4231 test case 2.
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
