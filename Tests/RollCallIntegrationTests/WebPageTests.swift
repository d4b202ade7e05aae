import Foundation
import RollCallClient
import RollCallCore
import Testing

extension Integration {
    @Suite("The browser example")
    struct WebPageTests {
        static var chromium: String? {
            ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first {
                FileManager.default.isExecutableFile(atPath: $0)
            }
        }

        /// docs/examples/web/index.html, in headless Chromium with a token made in the test, shows the group's
        /// contacts with their dots and "3 of 5 online", then "2 of 5 online" and bob offline once bob says bye.
        @Test(.enabled(if: chromium != nil, "needs chromium (Debian's package)"))
        func pageShowsTheGroupLive() async throws {
            let root = ChildProcess.repositoryRoot.appendingPathComponent("docs/examples/web")
            try await withGateway { gateway in
                let client = try gateway.broker.client()
                _ = try client.group(
                    .init(validating: "team")!, .init(members: ["alice", "bob", "carol", "dave", "erin"].map(\.id)))
                _ = try client.hello(.init(user: "alice".id, ttlMilliseconds: 60_000))
                let bob = try client.hello(
                    .init(user: "bob".id, status: .busy, text: "In a meeting", ttlMilliseconds: 60_000)
                ).session
                _ = try client.hello(.init(user: "carol".id, status: .away, ttlMilliseconds: 60_000))
                try client.bye(try client.hello(.init(user: "dave".id)).session)
                // A member (erin stays offline): a user token reads only its user's groups (docs/privacy.md).
                let token = try await gateway.token("erin")
                let page =
                    root.appendingPathComponent("index.html").absoluteString
                    + "?ws=\(gateway.url)&token=\(token)&group=team"
                let shots = FileManager.default.temporaryDirectory.appendingPathComponent("rollcall-web-\(getpid())")
                try FileManager.default.createDirectory(at: shots, withIntermediateDirectories: true)
                let driver = try ChildProcess(
                    "/usr/bin/env",
                    [
                        // The first wait is for the last member's line, not for the header: the header can come
                        // (with the subscription's group message) before the member list (with the `group` reply),
                        // which once made CI read a page with the header alone.
                        "python3", root.appendingPathComponent("drive.py").path, "--shots", shots.path, page,
                        "offline erin · never seen", "2 of 5 online",
                    ])
                defer { driver.terminate() }
                let before = try driver.waitForOutput(containing: "seen:", timeout: 20_000)
                print(before)
                #expect(before.contains("3 of 5 online"))
                #expect(before.contains("online alice · online"))
                #expect(before.contains("busy bob · busy · In a meeting"))
                #expect(before.contains("away carol · away"))
                #expect(before.contains("offline dave · last seen just now"))
                #expect(before.contains("offline erin · never seen"))
                try client.bye(bob)
                let after = try driver.waitForOutput(containing: "2 of 5 online", timeout: 15_000)
                print(after)
                print("screenshots: \(shots.path)/1.png, 2.png")
                #expect(after.contains("offline bob · last seen just now"))
                #expect(try driver.waitForExit(timeout: 10_000) == 0)
            }
        }
    }
}
