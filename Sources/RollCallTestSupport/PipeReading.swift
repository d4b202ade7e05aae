import Foundation

/// Reads a child process's pipe on a thread of its own until end of file.
///
/// Not `FileHandle.readabilityHandler`: setting and clearing it races inside libdispatch
/// (swift-corelibs-libdispatch#949), and a test process crashed there once, in `_dispatch_event_loop_drain`. Nor
/// `FileHandle.read(upToCount:)`, which waits for the whole count: a plain read(2) hands over what has come.
public enum PipeReading {
    /// Hands each piece read from `handle` to `received`, then `nil` at end of file (or when reading fails).
    public static func start(_ handle: FileHandle, name: String, _ received: @escaping @Sendable (Data?) -> Void) {
        let descriptor = handle.fileDescriptor
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                received(Data(buffer[..<count]))
            }
            received(nil)
            withExtendedLifetime(handle) {}
        }
        thread.name = name
        thread.start()
    }
}
