import RollCallBroker
import RollCallSecurity

/// The broker's CURVE key pair and its authorized-keys table, read at start: a file that cannot be used stops the
/// start with one line that names it (and the line at fault).
enum CurveFiles {
    /// The CURVE settings, or `nil` without `--curve-secret-key-file`; one file without the other is refused.
    static func load(secretKeyFile: String?, authorizedKeysFile: String?) throws(ConfigurationError) -> CurveSettings? {
        guard let secretKeyFile else {
            guard authorizedKeysFile == nil else {
                throw ConfigurationError(
                    "--authorized-keys", "needs --curve-secret-key-file: CURVE is what checks keys")
            }
            return nil
        }
        guard let keysFile = authorizedKeysFile else {
            throw ConfigurationError(
                "--curve-secret-key-file", "needs --authorized-keys: the table of keys that may connect")
        }
        let certificate: Certificate
        do {
            certificate = try CertificateFile.read(secretKeyFile)
        } catch {
            throw ConfigurationError("--curve-secret-key-file", "\(error)")
        }
        guard let secret = certificate.secretKey else {
            throw ConfigurationError(
                "--curve-secret-key-file",
                "\(secretKeyFile) is a public certificate: the broker needs its secret key")
        }
        switch AuthorizedKeys.load(path: keysFile) {
        case .success(let keys):
            // A file of comments only (or one misread, such as a table whose every key line was commented out)
            // would lock everyone out without a word.
            guard !keys.roles.isEmpty else {
                throw ConfigurationError("--authorized-keys", "\(keysFile) lists no key: nobody could connect")
            }
            return CurveSettings(secretKey: secret.z85, authorizedKeys: keys, authorizedKeysPath: keysFile)
        case .failure(let error):
            throw ConfigurationError("--authorized-keys", "\(error)")
        }
    }
}
