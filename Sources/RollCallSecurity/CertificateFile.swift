import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Reading and writing certificate files.
public enum CertificateFile {
    /// Why a certificate file cannot be read or written.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var path: String
        public var message: String
        public var description: String { "\(path): \(message)" }
    }

    /// Reads a certificate (secret or public) from `path`.
    public static func read(_ path: String) throws(Failure) -> Certificate {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw Failure(path: path, message: "cannot be read (\(error.localizedDescription))")
        }
        do {
            return try Certificate(zpl: text)
        } catch {
            throw Failure(path: path, message: error.description)
        }
    }

    /// Writes `certificate` to a new file at `path`, readable and writable by its owner only (0600), created at
    /// once with that mode so that a secret key is never readable by others, not even for a moment. An existing
    /// file is never overwritten.
    public static func create(_ certificate: Certificate, at path: String) throws(Failure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = errno == EEXIST ? "exists already; choose another path" : String(cString: strerror(errno))
            throw Failure(path: path, message: reason)
        }
        defer { close(descriptor) }
        let bytes = Array(certificate.zpl.utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason = String(cString: strerror(errno))
                unlink(path)
                throw Failure(path: path, message: "cannot be written (\(reason))")
            }
            written += n
        }
    }
}
