/* main.c -- placeholder during bring-up; replaced by the module manager. */
int main(void) { return (0); }
