#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The data directory: made with its missing parents (`mkdir -p`), each failure reported with `strerror`.
enum DataDirectory {
    /// Makes `path` unless it is already a directory.
    static func create(_ path: String) throws(StoreError) {
        do throws(CreationFailure) {
            try make(path)
        } catch {
            let message = error.component == path ? error.reason : "\(error.component): \(error.reason)"
            throw StoreError(.createDirectory, path: path, message: message, code: error.code)
        }
    }

    private struct CreationFailure: Error {
        var component: String
        var reason: String
        var code: Int32
    }

    private static func make(_ path: String) throws(CreationFailure) {
        if mkdir(path, 0o755) == 0 { return }
        var code = errno
        if code == ENOENT, let parent = parent(of: path) {
            try make(parent)
            if mkdir(path, 0o755) == 0 { return }
            code = errno
        }
        if code == EEXIST {
            guard isDirectory(path) else {
                throw CreationFailure(component: path, reason: "exists and is not a directory", code: ENOTDIR)
            }
            return
        }
        throw CreationFailure(component: path, reason: String(cString: strerror(code)), code: code)
    }

    /// The path without its last component, or `nil` where there is none to make (`/`, or a single name).
    private static func parent(of path: String) -> String? {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return nil }
        let parent = trimmed[..<slash]
        return parent.isEmpty ? nil : String(parent)
    }

    private static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }
}

/// A file's device and inode: which file a path names at the moment.
struct FileIdentity: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64

    /// The identity of the file at `path`, or `nil` if there is none.
    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }
}
