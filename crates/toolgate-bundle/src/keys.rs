//! Ed25519 keys in the PEM forms OpenSSL reads and writes, and key ids.

use std::path::Path;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes,
};
use sha2::{Digest, Sha256};

use crate::error::BundleError;

/// `ed25519:` + the first 16 hex digits of SHA-256 over the raw 32-byte
/// public key. Derived from the key itself, so a key id cannot be claimed
/// for another key, and short enough to read in logs.
pub fn key_id(public: &ed25519_dalek::VerifyingKey) -> String {
    let digest = Sha256::digest(public.as_bytes());
    format!("ed25519:{}", &hex::encode(digest)[..16])
}

/// A private Ed25519 key that signs bundles (the controller holds it).
///
/// Stored as unencrypted PKCS#8 v1 PEM (`-----BEGIN PRIVATE KEY-----`),
/// the same form `openssl genpkey -algorithm ed25519` writes, so keys move
/// freely between toolgate, OpenSSL and KMS import tools.
#[derive(Clone)]
pub struct SigningKey {
    inner: ed25519_dalek::SigningKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secret material.
        f.debug_struct("SigningKey")
            .field("keyid", &self.key_id())
            .finish()
    }
}

impl SigningKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        Self {
            inner: ed25519_dalek::SigningKey::generate(&mut rand_core::OsRng),
        }
    }

    /// A key from its 32-byte seed (tests and deterministic fixtures).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self {
            inner: ed25519_dalek::SigningKey::from_bytes(seed),
        }
    }

    /// Parses a PKCS#8 PEM private key (v1 or v2). Any other algorithm is
    /// `key_invalid`.
    pub fn from_pkcs8_pem(text: &str) -> Result<Self, BundleError> {
        let inner = ed25519_dalek::SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| {
            BundleError::KeyInvalid(format!("not an Ed25519 PKCS#8 private key: {e}"))
        })?;
        Ok(Self { inner })
    }

    /// Reads a PKCS#8 PEM private key file.
    pub fn from_file(path: &Path) -> Result<Self, BundleError> {
        Self::from_pkcs8_pem(&read(path)?)
    }

    /// PKCS#8 v1 PEM, readable by `openssl pkey`. The string is wiped on drop.
    pub fn to_pkcs8_pem(&self) -> Result<zeroize::Zeroizing<String>, BundleError> {
        // v1 (no embedded public key) is what OpenSSL itself writes.
        let bytes = KeypairBytes {
            secret_key: self.inner.to_bytes(),
            public_key: None,
        };
        bytes
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| BundleError::KeyInvalid(format!("cannot encode private key: {e}")))
    }

    /// Writes the private key to a new file readable only by its owner
    /// (mode 0600 on Unix). Refuses to overwrite an existing file, so a
    /// slip of the command line cannot destroy the key that signs a fleet.
    pub fn write_file(&self, path: &Path) -> Result<(), BundleError> {
        use std::io::Write;
        let pem = self.to_pkcs8_pem()?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let io = |source| BundleError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = options.open(path).map_err(io)?;
        file.write_all(pem.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            inner: self.inner.verifying_key(),
        }
    }

    /// Key id of the public half.
    pub fn key_id(&self) -> String {
        key_id(&self.inner.verifying_key())
    }

    /// Deterministic Ed25519 signature (RFC 8032) over `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer;
        self.inner.sign(message).to_bytes()
    }
}

/// A public Ed25519 key that verifies bundles (sidecars hold these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey {
    inner: ed25519_dalek::VerifyingKey,
}

impl PublicKey {
    /// Parses one SPKI PEM block (`-----BEGIN PUBLIC KEY-----`). Any other
    /// algorithm is `key_invalid`.
    pub fn from_spki_pem(text: &str) -> Result<Self, BundleError> {
        let inner = ed25519_dalek::VerifyingKey::from_public_key_pem(text.trim())
            .map_err(|e| BundleError::KeyInvalid(format!("not an Ed25519 SPKI public key: {e}")))?;
        Ok(Self { inner })
    }

    /// SPKI PEM, as `openssl pkey -pubout` writes it.
    pub fn to_spki_pem(&self) -> Result<String, BundleError> {
        self.inner
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| BundleError::KeyInvalid(format!("cannot encode public key: {e}")))
    }

    /// Writes the SPKI PEM to `path` (public: ordinary permissions).
    pub fn write_file(&self, path: &Path) -> Result<(), BundleError> {
        std::fs::write(path, self.to_spki_pem()?).map_err(|source| BundleError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// The raw 32-byte key.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.inner.as_bytes()
    }

    /// See [`key_id`].
    pub fn key_id(&self) -> String {
        key_id(&self.inner)
    }

    /// Strict verification (rejects small-order keys and non-canonical
    /// signatures, so one message has one valid signature per key).
    pub(crate) fn verify_strict(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        self.inner.verify_strict(message, &signature).is_ok()
    }
}

pub(crate) fn read(path: &Path) -> Result<String, BundleError> {
    std::fs::read_to_string(path).map_err(|source| BundleError::Io {
        path: path.display().to_string(),
        source,
    })
}
