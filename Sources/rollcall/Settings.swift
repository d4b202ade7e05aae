import ArgumentParser
import Foundation
import RollCallBroker
import RollCallClient

/// The broker's defaults, written once (in ``BrokerConfiguration`` and the settings it holds): every setting falls
/// back to its value there, and the help texts show it.
let defaults = BrokerConfiguration()

/// A setting read from its flag, else from its `ROLLCALL_*` environment variable, else its default.
func setting<T: LosslessStringConvertible>(_ flag: T?, _ variable: String, default value: T) throws -> T {
    if let flag { return flag }
    guard let text = ProcessInfo.processInfo.environment[variable] else { return value }
    return try parseSetting(text, variable)
}

/// The value of environment variable `variable`, `text`.
func parseSetting<T: LosslessStringConvertible>(_ text: String, _ variable: String) throws -> T {
    guard let parsed = T(text) else { throw ValidationError("\(variable)=\(text) is not a valid value") }
    return parsed
}

/// The endpoints every subcommand takes.
struct Endpoints: ParsableArguments {
    @Option(
        help:
            "The broker's command endpoint (ROUTER). Env: ROLLCALL_COMMAND_ENDPOINT. Default: \(defaults.commandEndpoint)."
    )
    var commandEndpoint: String?

    @Option(
        help: "The broker's update endpoint (XPUB). Env: ROLLCALL_UPDATE_ENDPOINT. Default: \(defaults.updateEndpoint)."
    )
    var updateEndpoint: String?

    func command() throws -> String {
        try setting(commandEndpoint, "ROLLCALL_COMMAND_ENDPOINT", default: defaults.commandEndpoint)
    }

    func update() throws -> String {
        try setting(updateEndpoint, "ROLLCALL_UPDATE_ENDPOINT", default: defaults.updateEndpoint)
    }
}

/// The endpoints of the client subcommands: one update endpoint, and one or more command endpoints (the nodes of a
/// cluster), repeated or comma-separated. `online` fails over between them; the other subcommands use the first
/// that answers.
struct ClientEndpoints: ParsableArguments {
    @Option(
        help:
            "The broker's command endpoint (ROUTER); repeat it or give a comma list for several nodes: online fails over between them, other commands use the first that answers. Env: ROLLCALL_COMMAND_ENDPOINT (a comma list). Default: \(defaults.commandEndpoint)."
    )
    var commandEndpoint: [String] = []

    @Option(
        help: "The broker's update endpoint (XPUB). Env: ROLLCALL_UPDATE_ENDPOINT. Default: \(defaults.updateEndpoint)."
    )
    var updateEndpoint: String?

    /// The command endpoints, in the order given: from the flags, else from `ROLLCALL_COMMAND_ENDPOINT`, else the
    /// default.
    func commands() throws -> [String] {
        let texts =
            !commandEndpoint.isEmpty
            ? commandEndpoint
            : [ProcessInfo.processInfo.environment["ROLLCALL_COMMAND_ENDPOINT"] ?? defaults.commandEndpoint]
        let endpoints = texts.flatMap { $0.split(separator: ",", omittingEmptySubsequences: false) }
            .map { $0.trimmingCharacters(in: .whitespaces) }
        guard !endpoints.contains(where: \.isEmpty) else {
            throw ValidationError("an empty command endpoint in '\(texts.joined(separator: ","))'")
        }
        return endpoints
    }

    /// The first command endpoint, for what talks to one node (`watch`).
    func command() throws -> String { try commands()[0] }

    func update() throws -> String {
        try setting(updateEndpoint, "ROLLCALL_UPDATE_ENDPOINT", default: defaults.updateEndpoint)
    }
}

/// Prints one line to standard output at once, so that a pipe reader sees it without delay.
func emit(_ line: String) {
    print(line)
    fflush(nil)
}

/// Reports a change of state as one line on standard error, apart from the data on standard output.
func note(_ line: String) {
    FileHandle.standardError.write(Data("rollcall: \(line)\n".utf8))
}

/// Reports a failure as one clear line on standard error and exits non-zero.
func fail(_ error: Error) -> ExitCode {
    FileHandle.standardError.write(Data("rollcall: \(error)\n".utf8))
    return ExitCode(1)
}

/// The CURVE keys every client subcommand takes, for a broker that runs CURVE (docs/security.md).
struct ClientKeys: ParsableArguments {
    @Option(
        help:
            "The broker's CURVE public key (40 Z85 characters; the broker logs it at start). Env: ROLLCALL_SERVER_KEY. Default: none (NULL mechanism)."
    )
    var serverKey: String?

    @Option(help: "This client's key pair (czmq certificate, from rollcall keygen). Env: ROLLCALL_KEY_FILE.")
    var keyFile: String?

    @Option(
        help:
            "The user a `user` key is bound to, so that the updates the broker sends that user alone are taken (protocol §8.2.1). Env: ROLLCALL_KEY_USER."
    )
    var keyUser: String?

    /// The user the key is bound to, for a subscriber's own copies; `nil` for a reader's or an operator's key.
    func viewer() throws -> UserID? {
        guard let text = keyUser ?? ProcessInfo.processInfo.environment["ROLLCALL_KEY_USER"] else { return nil }
        guard let user = UserID(validating: text) else { throw ValidationError("--key-user: not a user id: \(text)") }
        return user
    }

    /// The credentials, or `nil` for a broker without CURVE; one of the two without the other is a usage error.
    func credentials() throws -> CurveCredentials? {
        let environment = ProcessInfo.processInfo.environment
        let server = serverKey ?? environment["ROLLCALL_SERVER_KEY"]
        let file = keyFile ?? environment["ROLLCALL_KEY_FILE"]
        switch (server, file) {
        case (nil, nil): return nil
        case (let server?, let file?):
            do {
                return try CurveCredentials(serverKey: server, keyFile: file)
            } catch {
                throw ValidationError("\(error)")
            }
        case (nil, _): throw ValidationError("--key-file needs --server-key (the broker's public key)")
        case (_, nil): throw ValidationError("--server-key needs --key-file (this client's key pair)")
        }
    }
}
