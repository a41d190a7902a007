"""Driving JupyterLab 4 in a browser the way a student does, robustly on a loaded machine.

Rules learnt the hard way: open a notebook with `?reset` (otherwise the tabs of the last visit
come back and start kernels); a cell's outputs are read with `textContent` (cells out of view
are not laid out, so `.text` is empty); the kernel is idle only when the toolbar's execution
indicator says `data-status="idle"` *and* the status bar says "Idle", with no `[*]` prompt.
Every wait is bounded and fails with what the page showed last.
"""
from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import dataclass

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

# The state of the notebook in view: kernel status in the toolbar and the status bar, and for
# every cell (in notebook order) its kind, its prompt ("[3]:", "[*]:", "[ ]:"), its outputs' text and
# whether one of them is an error or stderr (JupyterLab renders both as application/vnd.jupyter.stderr).
_STATE_JS = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
if (!panel) return null;
const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
const bar = document.querySelector('#jp-main-statusbar');
return {
  toolbar: indicator ? indicator.getAttribute('data-status') : null,
  statusbar: bar ? bar.textContent : '',
  dialog: !!document.querySelector('.jp-Dialog'),
  cells: [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map(c => ({
    code: c.classList.contains('jp-CodeCell'),
    prompt: ((c.querySelector('.jp-InputArea-prompt') || {}).textContent || '').trim(),
    output: (c.querySelector('.jp-OutputArea') || {}).textContent || '',
    stderr: !!c.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'),
  })),
};
"""

# The text of JupyterLab's "Error Starting Kernel" dialog, or null when none is shown.
_KERNEL_ERROR_JS = """
const dialog = [...document.querySelectorAll('.jp-Dialog')].find(
  d => (d.querySelector('.jp-Dialog-header')?.textContent || '').includes('Error Starting Kernel'));
return dialog ? dialog.textContent : null;
"""

# Close every tab of the main area (but those of the class arguments[0]), without asking to save: the widgets
# disposed of, their kernels left to shut_down_kernels.
_CLOSE_TABS_JS = """
for (const w of [...window.jupyterapp.shell.widgets('main')]) if (!arguments[0] || !w.hasClass(arguments[0])) w.dispose();
"""

# Whether the kernel of the notebook in view is idle with nothing queued: cheap enough to poll.
_IDLE_JS = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
if (!panel) return false;
const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
const bar = document.querySelector('#jp-main-statusbar');
const queued = [...panel.querySelectorAll('.jp-InputArea-prompt')].some(p => p.textContent.trim() === '[*]:');
return !!indicator && indicator.getAttribute('data-status') === 'idle'
  && !!bar && /\\|\\s*Idle/.test(bar.textContent) && !queued;
"""

# The prompt of every cell of the notebook in view ("[3]:", "[*]:", "[ ]:"; "" for markdown).
_PROMPTS_JS = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
return panel ? [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map(
  c => ((c.querySelector('.jp-InputArea-prompt') || {}).textContent || '').trim()) : [];
"""


@dataclass(frozen=True)
class CellView:
    code: bool
    prompt: str
    output: str
    stderr: bool

    @property
    def executed(self) -> bool:
        return bool(re.fullmatch(r"\[\d+\]:", self.prompt))


class Timeout(AssertionError):
    """A bounded wait ran out (the message says what the page showed last)."""


class LabPage:
    def __init__(self, driver, base_url: str, token: str):
        self.driver, self.base_url, self.token = driver, base_url.rstrip("/"), token

    # ------------------------------------------------------------------ server side
    def api(self, method: str, path: str):
        request = urllib.request.Request(f"{self.base_url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        for kernel in self.api("GET", "/api/kernels"):
            self.api("DELETE", f"/api/kernels/{kernel['id']}")

    # ------------------------------------------------------------------ waiting
    def wait_for(self, what: str, condition, timeout: float, poll: float = 0.5):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = condition()
            if last:
                return last
            self.fail_on_kernel_error(what)
            time.sleep(poll)
        raise Timeout(f"{what}: not after {timeout:.0f} s (last seen: {str(self.state())[:600]})")

    def fail_on_kernel_error(self, what: str) -> None:
        """Stop waiting at once when JupyterLab shows "Error Starting Kernel" (a broken kernelspec, say): the
        kernel will never become idle, and the dialog's text says why."""
        dialog = self.driver.execute_script(_KERNEL_ERROR_JS)
        if dialog:
            raise Timeout(f"{what}: JupyterLab could not start the kernel: {dialog[:300]}")

    def state(self) -> dict | None:
        return self.driver.execute_script(_STATE_JS)

    def prompts(self) -> list[str]:
        return self.driver.execute_script(_PROMPTS_JS)

    def cells(self) -> list[CellView]:
        state = self.state()
        return [CellView(**c) for c in (state or {}).get("cells", [])]

    def _idle_now(self) -> bool:
        return bool(self.driver.execute_script(_IDLE_JS))  # "Python 3 (ipykernel) | Idle" in the status bar

    def wait_idle(self, timeout: float = 180) -> None:
        """The kernel is idle and nothing is queued, seen twice half a second apart (no blink between cells)."""
        self.wait_for("kernel idle", lambda: self._idle_now() and (time.sleep(0.5) or self._idle_now()), timeout)

    # ------------------------------------------------------------------ actions
    def open(self, path: str, cells: int, timeout: float = 180) -> None:
        """Open the notebook `path` alone, on a kernel of its own: in the JupyterLab already loaded in the page
        when the lab shows it to the page (`--LabApp.expose_app_in_browser=True`: window.jupyterapp), its tabs
        closed first (a reload of the whole application costs twice the browser's time); else by loading
        JupyterLab on that notebook alone."""
        in_page = self.driver.execute_script("return !!window.jupyterapp")
        if in_page:
            self.driver.execute_script(_CLOSE_TABS_JS)
        self.shut_down_kernels()
        if in_page:
            self.driver.execute_script("window.jupyterapp.commands.execute('docmanager:open', {path: arguments[0]});",
                                       path)
        else:
            self.driver.get(f"{self.base_url}/lab/tree/{path}?reset")
        self.wait_for(f"{path}: {cells} cells shown", lambda: len(self.prompts()) == cells, timeout)
        if in_page:
            self.driver.execute_script(_CLOSE_TABS_JS, "jp-NotebookPanel")  # (the Launcher of an empty main area)
        self.wait_idle(timeout)

    def _click_menu(self, menu: str, command: str) -> None:
        items = self.driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
        next(i for i in items if i.text.strip() == menu).click()
        entry = self.wait_for(f"menu entry {command}", lambda: self.driver.find_elements(
            By.CSS_SELECTOR, f'.lm-Menu-item[data-command="{command}"]'), 30)
        entry[0].click()

    def run_all(self, timeout: float = 240) -> list[CellView]:
        """Run > Run All Cells; returns the cells once the kernel is idle again.

        Only on a notebook that shows no earlier run: a fresh kernel counts from 1 again, so the
        prompts of a saved run could not tell the new run's progress."""
        earlier = [p for p in self.prompts() if re.fullmatch(r"\[\d+\]:", p)]
        assert not earlier, f"Run All on a notebook that shows an earlier run ({earlier[:3]}...): open an unsaved copy"
        self._click_menu("Run", "runmenu:run-all")
        self.wait_for("Run All started", lambda: any(p not in ("", "[ ]:") for p in self.prompts()), 60)
        self.wait_idle(timeout)
        return self.cells()

    def run_through(self, index: int, timeout: float = 240) -> list[CellView]:
        """Run > Run All Above Selected Cell, with the cell after `index` selected: cells 0..index."""
        earlier = [p for p in self.prompts() if re.fullmatch(r"\[\d+\]:", p)]
        assert not earlier, f"a notebook that shows an earlier run ({earlier[:3]}...): open an unsaved copy"
        self.cell_node(index + 1).find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
        self._click_menu("Run", "notebook:run-all-above")
        self.wait_for(f"cell {index} ran", lambda: re.fullmatch(r"\[\d+\]:", self.prompts()[index]), timeout)
        self.wait_idle(timeout)
        return self.cells()

    def cell_node(self, index: int):
        node = self.driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")[index]
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", node)
        return node

    def type_into(self, index: int, line: str) -> None:
        """Replace the source of cell `index` with one line typed on the keyboard."""
        editor = self.cell_node(index).find_element(By.CSS_SELECTOR, ".cm-content")
        editor.click()
        ActionChains(self.driver).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
        ActionChains(self.driver).send_keys(line).perform()
        self.wait_for("typed text in the editor", lambda: editor.get_attribute("textContent") == line, 30)

    def run_cell(self, index: int, timeout: float = 120) -> list[CellView]:
        """Select cell `index` (a click on its prompt) and run it with Shift+Enter."""
        before = self.prompts()[index]
        self.cell_node(index).find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        self.wait_for(f"cell {index} ran", lambda: self.prompts()[index] not in (before, "[*]:"), timeout)
        self.wait_idle(timeout)
        return self.cells()

    def run_cell_and_next(self, index: int, timeout: float = 120) -> list[CellView]:
        """Shift+Enter in cell `index` (its editor has the focus), then Shift+Enter on the cell below."""
        before = self.prompts()[index + 1]
        for _ in range(2):
            ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        self.wait_for("the cell below ran", lambda: self.prompts()[index + 1] not in (before, "[*]:"), timeout)
        self.wait_idle(timeout)
        return self.cells()

    def validate(self, timeout: float = 300) -> tuple[str, str]:
        """Click nbgrader's Validate button: (the result's class, its text), after closing the dialog."""
        # nbgrader's toolbar button (a <jp-button class="validate-button">): it saves, then validates on the server.
        self.driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .validate-button").click()
        message = self.wait_for("the Validate dialog", lambda: self.driver.find_elements(
            By.CSS_SELECTOR, ".jp-Dialog #validation-message"), timeout)[0]
        kind = next((c for c in message.get_attribute("class").split() if c.startswith("validation-")), "")
        text = message.get_attribute("textContent")
        self.driver.find_element(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept").click()
        self.wait_for("the dialog closed", lambda: not self.driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"), 30)
        return kind, text

    def screenshot_output(self, index: int, path) -> None:
        """A PNG of the image that cell `index` shows, once it is decoded and wholly in view."""
        image = self.cell_node(index).find_element(By.CSS_SELECTOR, ".jp-OutputArea-output img")
        self.wait_for("the plot decoded", lambda: self.driver.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth > 0;", image), 30)

        def in_view() -> bool:  # cells above may still grow as they are laid out: scroll until it holds
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", image)
            time.sleep(0.5)
            return self.driver.execute_script(_IN_VIEW_JS, image)

        self.wait_for("the plot wholly in view", in_view, 30)
        image.screenshot(str(path))


_IN_VIEW_JS = """
const box = arguments[0].getBoundingClientRect();
const scroller = arguments[0].closest('.jp-WindowedPanel-outer') || arguments[0].closest('.jp-Notebook');
const view = scroller.getBoundingClientRect();
return box.height > 50 && box.top >= view.top && box.bottom <= view.bottom;
"""
