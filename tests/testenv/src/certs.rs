//! The control plane's PKI: one CA, the API server's serving certificate, an admin client
//! certificate (group system:masters) and the service-account signing key pair.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Paths of the PEM files written by [`Pki::write`].
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    /// The CA's key, kept so that real nodes can get certificates later ([`Pki::issue`]).
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

impl Pki {
    /// Generates everything into `dir`. `service_ip` is the first address of the service
    /// range (the `kubernetes` Service), which the serving certificate must name, as it must
    /// every address in `more_ips` (where pods reach the API server).
    pub fn write(dir: &Path, service_ip: IpAddr, more_ips: &[IpAddr]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let ca_key_pem = ca_key.serialize_pem();
        let ca = CertifiedIssuer::self_signed(ca_params(), ca_key)?;

        let mut serving = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            "kubernetes.default.svc.cluster.local".to_owned(),
        ])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse()?));
        serving.subject_alt_names.push(SanType::IpAddress(service_ip));
        for ip in more_ips {
            serving.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        serving.distinguished_name = name("kube-apiserver", None);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let mut admin = CertificateParams::default();
        admin.distinguished_name = name("redlock-envtest-admin", Some("system:masters"));
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_key = KeyPair::generate()?;
        let admin_cert = admin.signed_by(&admin_key, &ca)?;

        let sa = KeyPair::generate()?;

        let pki = Self {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        };
        std::fs::write(&pki.ca_cert, ca.pem())?;
        std::fs::write(&pki.ca_key, ca_key_pem)?;
        std::fs::write(&pki.serving_cert, serving_cert.pem())?;
        std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;
        std::fs::write(&pki.admin_cert, admin_cert.pem())?;
        std::fs::write(&pki.admin_key, admin_key.serialize_pem())?;
        std::fs::write(&pki.sa_key, sa.serialize_pem())?;
        std::fs::write(&pki.sa_pub, sa.public_key_pem())?;
        Ok(pki)
    }

    /// A certificate signed by this CA, written as `<dir>/<file>.crt` and `.key`: a client
    /// certificate when `ips` is empty (`common_name` and `organization` are the user and
    /// group the API server sees), else a serving certificate for those addresses.
    pub fn issue(
        &self,
        dir: &Path,
        file: &str,
        common_name: &str,
        organization: Option<&str>,
        ips: &[IpAddr],
    ) -> Result<(PathBuf, PathBuf)> {
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(&self.ca_key)?)?;
        let issuer = Issuer::new(ca_params(), ca_key);
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(common_name, organization);
        if ips.is_empty() {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        } else {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            params.subject_alt_names = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        std::fs::create_dir_all(dir)?;
        let (cert_path, key_path) = (dir.join(format!("{file}.crt")), dir.join(format!("{file}.key")));
        std::fs::write(&cert_path, cert.pem())?;
        std::fs::write(&key_path, key.serialize_pem())?;
        Ok((cert_path, key_path))
    }

    /// An admin kubeconfig for `server` referring to the PEM files by path.
    pub fn kubeconfig(&self, server: &str) -> String {
        self.kubeconfig_for(server, &self.admin_cert, &self.admin_key)
    }

    /// A kubeconfig for `server` that trusts this CA and logs in with the client certificate
    /// `cert` (a node's, kube-proxy's), referring to the PEM files by path.
    pub fn kubeconfig_for(&self, server: &str, cert: &Path, key: &Path) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: envtest\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: envtest\n    namespace: default\ncurrent-context: envtest\n",
            ca = self.ca_cert.display(),
            cert = cert.display(),
            key = key.display(),
        )
    }
}

/// The CA's parameters; [`Pki::issue`] rebuilds the issuer from them and the saved key.
fn ca_params() -> CertificateParams {
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = name("redlock-envtest-ca", None);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}
